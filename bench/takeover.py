"""A bucket partition's takeover with a log of --mb MiB in closed segments: its time, the bytes it
GETs, and the cache it leaves (issue 29: "failover in seconds", "brokers that keep nothing local").

A broker on a bucket of versitygw (the tests' real S3 server, on loopback) writes the same
incompressible records (1 KiB values) to two topics of one partition each, sealed on each local
roll (segment.bytes --segment-mb), with a tail of --tail-mb left unsealed, then stops. Then,
alternating, --repeat rounds of `broker.bucket.takeover.take_over` in this process (what a broker
started on another machine runs per partition: claim an epoch, restore, recover, seal the tail),
each into a new empty cache directory:
- "tail": topic `bench-closed`, restored as this branch restores a topic: the flush objects above
  the manifest's closed segments only; the closed segments are read from the bucket when asked;
- "whole" (the baseline): topic `_bench-closed`, which this branch still restores whole (the
  broker reads `_` topics from their start itself), exactly main's restore_local: every closed
  segment GET into the cache.
Per round: seconds, GET bytes (the process's `topiclake_object_store_*` counters) and the cache
directory's bytes; in the first round, then the closed range read back in 1 MiB fetches by the
broker's own reads (ranged GETs from the bucket after "tail", the cache's Log after "whole").
Each round seals the previous round's tail into a small closed segment (a takeover's own commit),
so later rounds restore an empty tail.

    python bench/takeover.py [--mb 200] [--tail-mb 4] [--segment-mb 64] [--repeat 3]

The last line is one JSON object with every figure and the ratios (whole / tail) of the first
round, where both restore the same tail.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _broker import _free_port, create_topic, running_broker  # noqa: E402
from object_store import produce_values  # noqa: E402

TOPICS = {"tail": "bench-closed", "whole": "_bench-closed"}
FETCH_BYTES = 1024 * 1024


def fill(bootstrap: str, store, mb: int, tail_mb: int, segment_mb: int) -> dict[str, dict]:
    """Both topics written and their closed part sealed; per topic its closed and tail offsets."""
    from topiclake.objectlog.keys import PartitionKeys
    from topiclake.objectlog.manifest import load_newest

    values = [os.urandom(1024) for _ in range(256)]
    out = {}
    for topic in TOPICS.values():
        create_topic(bootstrap, topic, **{"segment.bytes": str(segment_mb * 1024 * 1024)})
        seconds = produce_values(bootstrap, topic, values, mb * 1024)
        keys = PartitionKeys(topic, 0)
        deadline = time.monotonic() + 300
        while load_newest(store, keys).end_offset < mb * 1024 - segment_mb * 1024:  # rolled segments sealed
            if time.monotonic() > deadline:
                raise SystemExit(f"{topic}: not sealed after 300 s")
            time.sleep(0.5)
        produce_values(bootstrap, topic, values, tail_mb * 1024)
        manifest = load_newest(store, keys)
        out[topic] = {"produce_s": seconds, "closed_segments": len(manifest.segments),
                      "closed_bytes": sum(e.size for e in manifest.segments), "closed_end": manifest.end_offset}
    return out


def take_over_once(store, settings, topic: str, cache: Path, read_back: bool = False) -> dict:
    """One takeover of `topic`-0 into the empty `cache`: seconds, GET bytes, cache bytes (and,
    `read_back`, the closed range read back through the partition)."""
    from topiclake.broker.bucket.takeover import take_over
    from topiclake.broker.partitions import Partition
    from topiclake.objectlog.keys import PartitionKeys
    from topiclake.segments.storage import TopicMeta

    meta = TopicMeta.from_json(store.get(f"topics/{topic}.json"), source=topic)

    def make_partition(log_, epoch: int):
        part = Partition(topic, 0, log_, meta.log_config)
        part.bucket_epoch = epoch
        part.load_state()
        return part

    before = store.metrics.snapshot()
    started = time.perf_counter()
    part = take_over(store, PartitionKeys(topic, 0), settings, cache / f"{topic}-0", meta.log_config,
                     owner={"broker_id": 99}, make_partition=make_partition)
    seconds = time.perf_counter() - started
    after = store.metrics.snapshot()
    got = sum(after[op]["bytes_read"] - before[op]["bytes_read"] for op in after)
    gets = sum(after[op]["requests"] - before[op]["requests"] for op in ("get", "get_range"))
    cached = sum(p.stat().st_blocks * 512 for p in cache.rglob("*") if p.is_file())  # preallocated indexes are sparse
    figures = {"seconds": seconds, "get_bytes": got, "get_requests": gets, "cache_bytes": cached,
               "closed_below_cache": part.closed is not None}
    if read_back:
        figures.update(read_closed_range(part))
    part.log.close()
    return figures


def read_closed_range(part) -> dict:
    """The closed range read as a consumer's fetches would (1 MiB each, the Java and librdkafka
    default per partition), by the broker's own read of that range: from the bucket by ranged GETs
    (ClosedSegments.read) after a tail restore, from the cache (Log.read) after a whole one."""
    end = part.tail.manifest.end_offset
    offset, total, fetches = 0, 0, 0
    started = time.perf_counter()
    while offset < end:
        if part.closed is not None and offset < part.log.log_start_offset:
            data, offset = part.closed.read(offset, FETCH_BYTES, True)
            total += len(data)
        else:
            result = part.log.read(offset, FETCH_BYTES, min_one_message=True)
            total += len(result.to_bytes())
            offset = result.next_offset
        fetches += 1
    seconds = time.perf_counter() - started
    return {"read_mb_per_s": total / 1e6 / seconds, "read_fetches": fetches, "read_bytes": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=200, help="MiB per topic, most of it in closed segments")
    parser.add_argument("--tail-mb", type=int, default=4, help="MiB left unsealed after the closed part")
    parser.add_argument("--segment-mb", type=int, default=64, help="the topics' segment.bytes, in MiB")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from tests.support.s3 import VersityGW
    from topiclake.broker.bucket.settings import BucketSettings
    from topiclake.store.objects import ObjectStore
    from topiclake.store.root import parse_root

    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-takeover-") as tmp_name:
        tmp = Path(tmp_name)
        gateway = VersityGW(tmp / "versitygw").start()
        try:
            os.environ.update(gateway.env())
            url = f"s3://{gateway.create_bucket('bench')}/root"
            root = parse_root(url)
            store = ObjectStore(root)
            (tmp / "writer").mkdir()
            port = _free_port()
            with running_broker(tmp / "writer" / "cache", "--cache-dir", str(tmp / "writer" / "cache"),
                                "--metrics-listen", f"127.0.0.1:{port}", root=url) as (bootstrap, _data, _pid):
                written = fill(bootstrap, store, args.mb, args.tail_mb, args.segment_mb)
            print(json.dumps({"written": written}), flush=True)
            settings = BucketSettings(root=root, cache_dir=tmp / "caches")
            rounds: dict[str, list[dict]] = {name: [] for name in TOPICS}
            for i in range(args.repeat):
                for name, topic in TOPICS.items():
                    cache = tmp / "caches" / f"{name}-{i}"
                    cache.mkdir(parents=True)
                    figures = take_over_once(store, settings, topic, cache, read_back=i == 0)
                    rounds[name].append(figures)
                    print(json.dumps({"round": i, "restore": name, **figures}), flush=True)
        finally:
            gateway.stop()
    medians = {name: {key: statistics.median(r[key] for r in runs) for key in ("seconds", "get_bytes", "cache_bytes")}
               for name, runs in rounds.items()}
    result = {"mb": args.mb, "tail_mb": args.tail_mb, "segment_mb": args.segment_mb, "repeat": args.repeat,
              "load_average_before": load, "load_average_after": os.getloadavg(), "written": written,
              "first_round": {name: runs[0] for name, runs in rounds.items()}, "median": medians,
              # the first round restores the same --tail-mb tail both ways; later rounds an empty one
              "ratio_seconds_whole_over_tail": rounds["whole"][0]["seconds"] / rounds["tail"][0]["seconds"],
              "ratio_get_bytes_whole_over_tail": rounds["whole"][0]["get_bytes"] / rounds["tail"][0]["get_bytes"],
              "ratio_cache_bytes_whole_over_tail": rounds["whole"][0]["cache_bytes"] / rounds["tail"][0]["cache_bytes"]}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
