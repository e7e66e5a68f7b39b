"""The broker's CPU per Produce request as librdkafka sends them to a topic of many partitions: one
partition per request (issue 33). An in-process broker (tests/support/in_process_broker.py) on a
fresh root, a topic of --partitions partitions, all opened; a raw client in another process
pipelines --requests pre-encoded Produce v9 requests, --in-flight at a time, each one lz4 batch of
--records 100-byte records to the next partition (acks=all), or with --per-request N to the next
N partitions (librdkafka's requests when a producer spreads records over tens to hundreds of
partitions: at 100, ~130 records per request over all of them). Reported: requests/s and each broker
thread's CPU time per request (/proc/self/task; the event loop's and the writer's), after a
warm-up of 2,000 requests. --profile: cProfile of the event loop thread during the measured run.

No Kafka here: this is the per-request cost that bench/partitions.py's ratio against Kafka is made
of, for before/after comparisons of the request path (PYTHONPATH to another build's package
runs that build in the same minutes).

    python bench/produce_requests.py [--partitions 2000] [--requests 10000] [--per-request 1] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from tests.support.in_process_broker import InProcessBroker  # noqa: E402

CLIENT = """
import socket, struct, sys, time
from topiclake.protocol import codec
from tests.support.wire import batch, produce_request
from kio.schema.produce.v9 import request as produce_req
port, partitions, requests, in_flight, records, per_request = map(int, sys.argv[1:7])
data = batch([b"x" * 100] * records, compression="lz4")
def wide(i):
    one = produce_request("wide", data)
    return one.__class__(transactional_id=None, acks=one.acks, timeout=one.timeout, topic_data=(
        produce_req.TopicProduceData(name="wide", partition_data=tuple(
            produce_req.PartitionProduceData(index=(i * per_request + j) % partitions, records=data)
            for j in range(per_request))),))
frames = [codec.encode_request(i, wide(i), "bench") for i in range(requests)]
sock = socket.create_connection(("127.0.0.1", port))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
answers = sock.makefile("rb")
def answer():
    size, = struct.unpack(">i", answers.read(4))
    answers.read(size)
start = time.perf_counter()
for i, frame in enumerate(frames):
    sock.sendall(frame)
    if i >= in_flight - 1:
        answer()
for _ in range(min(in_flight - 1, requests)):
    answer()
print(requests / (time.perf_counter() - start))
"""


def thread_cpu_s() -> dict[str, float]:
    """CPU seconds of this process's threads by name (the loop's thread is "loop")."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        name = names.get(int(tid), "other").split("_")[0]
        name = "loop" if name.startswith("Thread-") else name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def run_client(port: int, partitions: int, requests: int, in_flight: int, records: int, per_request: int) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)]))}
    shape = (port, partitions, requests, in_flight, records, per_request)
    out = subprocess.run([sys.executable, "-c", CLIENT, *map(str, shape)], capture_output=True, text=True, env=env,
                         check=True)
    return float(out.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--in-flight", type=int, default=5)
    parser.add_argument("--records", type=int, default=40, help="records per request's batch")
    parser.add_argument("--per-request", type=int, default=1, help="partitions per request (one batch each)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-requests-") as root:
        broker = InProcessBroker(Path(root)).start()
        try:
            broker.create_topic("wide", args.partitions)
            asyncio.run_coroutine_threadsafe(broker.context.partitions.open_many(
                ("wide", i) for i in range(args.partitions)), broker.loop).result(300)
            shape = (broker.server.port, args.partitions, args.requests, args.in_flight, args.records, args.per_request)
            run_client(*shape[:2], 2000, *shape[3:])  # warm-up
            profile = cProfile.Profile()
            if args.profile:
                broker.loop.call_soon_threadsafe(profile.enable)
            before = thread_cpu_s()
            rate = run_client(*shape)
            after = thread_cpu_s()
            if args.profile:
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), broker.loop).result()
                broker.loop.call_soon_threadsafe(profile.disable)
                asyncio.run_coroutine_threadsafe(asyncio.sleep(0), broker.loop).result()
        finally:
            broker.stop()
    if args.profile:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(40)
        print(text.getvalue())
    result = {"bench": "produce_requests", "partitions": args.partitions, "per_request": args.per_request,
              "requests": args.requests,
              "requests_per_s": round(rate), "load": round(os.getloadavg()[0], 1)}
    result.update({f"cpu_us_per_request_{name}": round((after[name] - before.get(name, 0.0)) / args.requests * 1e6)
                   for name in after if after[name] - before.get(name, 0.0) > 0.01})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
