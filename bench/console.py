"""The console's page times: `topiclake console` over a broker with --topics topics (a few records
each), --groups consumer groups with committed offsets and --tables Delta tables, each page asked
--repeat times over loopback after one warm-up (server time to the whole HTML: median, max, size);
then, when Debian's chromium is there, the first contentful paint in headless Chromium of the
cluster and topic pages (the median of three loads). The target is < 500 ms first paint with 100
topics. The last line is one JSON object.

    python bench/console.py [--topics 100] [--groups 20] [--tables 10] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import REPO, _free_port, running_broker

sys.path.insert(0, str(REPO))
from tests.support.console import CHROMIUM, FIRST_PAINT_JS  # the tests' browser and paint probe


def fill(bootstrap: str, data: Path, topics: int, groups: int, tables: int) -> None:
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from deltalake import write_deltalake

    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"bench-{i:04d}" for i in range(topics)]
    for future in admin.create_topics([NewTopic(n, 3) for n in names]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for n in names:
        for i in range(30):
            producer.produce(n, f"{n}-{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    for g in range(groups):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-group-{g}"})
        offsets = [TopicPartition(names[(g + k) % topics], p, 5) for k in range(5) for p in range(3)]
        for attempt in range(100):  # the coordinator loads __consumer_offsets right after the start
            try:
                consumer.commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.COORDINATOR_LOAD_IN_PROGRESS or attempt == 99:
                    raise
                time.sleep(0.2)
        consumer.close()
    for t in range(tables):
        write_deltalake(str(data / "tables" / names[t]), pa.table({"offset": list(range(100))}))


def page_times(url: str, repeat: int) -> dict:
    urllib.request.urlopen(url, timeout=30).read()
    times, size = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        size = len(urllib.request.urlopen(url, timeout=30).read())
        times.append((time.perf_counter() - started) * 1000)
    return {"median_ms": round(statistics.median(times), 1), "max_ms": round(max(times), 1), "bytes": size}


def first_paints(base: str, paths: list[str]) -> dict:
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        for path in paths:
            page.goto(base + path)
            paints = []
            for _ in range(3):
                page.goto(base + path)
                paints.append(page.evaluate(FIRST_PAINT_JS))
            out[path] = round(statistics.median(paints), 1)
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with running_broker() as (bootstrap, data, _pid):
        fill(bootstrap, data, args.topics, args.groups, min(args.tables, args.topics))
        port = _free_port()
        log = open(data.parent / "console.log", "ab")
        console = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "console", "--data", str(data),
                                    "--bootstrap", bootstrap, "--listen", f"127.0.0.1:{port}"],
                                   stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(base + "/healthz", timeout=1).read()
                    break
                except OSError:
                    assert console.poll() is None and time.monotonic() < deadline, "the console did not start"
                    time.sleep(0.1)
            paths = ["/", "/topics", "/topics/bench-0000", "/topics/bench-0000/records?partition=0",
                     "/groups", "/groups/bench-group-0", "/tables", "/tables/bench-0000", "/schemas"]
            result = {"topics": args.topics, "groups": args.groups, "tables": args.tables, "pages": {}}
            for path in paths:
                result["pages"][path] = page_times(base + path, args.repeat)
                print(f"{path:<42} {result['pages'][path]}")
            if Path(CHROMIUM).exists():
                result["first_paint_ms"] = first_paints(base, ["/", "/topics", "/groups", "/tables"])
                print(f"first contentful paint (ms): {result['first_paint_ms']}")
        finally:
            console.terminate()
            console.wait(15)
            log.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
