"""The broker's periodic refresh (partitions.PartitionManager.refresh_all, every REFRESH_INTERVAL_S):
one round over N open partitions none of which a maintenance job changed, against the round as it
was before (every partition's Log.refresh on the writer thread, one hop each: the baseline, in the
same run).

In one process: a real PartitionManager on a new directory root, one topic of --partitions
partitions, each opened and given --segments closed segments of one record (the old refresh
looks at every closed segment's file), then --repeat rounds of each, alternating; each figure
is the median. "ratio" = refresh_all round / the old round; "old_refresh_cpu_ms": the CPU the
old round's refreshes take (on this thread, without the hops).

    python bench/refresh.py [--partitions 2000] [--segments 2] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
import time

from topiclake.broker.partitions import PartitionManager
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.storage import StorageLayout

TOPIC = "bench-refresh"


async def run(partitions: int, segments: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-refresh-") as root:
        manager = PartitionManager(StorageLayout(root))
        manager.create_topic(TOPIC, partitions)
        await manager.open_many((TOPIC, p) for p in range(partitions))
        parts = [await manager.get(TOPIC, p) for p in range(partitions)]

        def fill() -> None:
            batch = build_batch([Record(0, 1000, None, b"v", ())], base_offset=0)
            for part in parts:
                for _ in range(segments):
                    part.append_batch(batch, read_header(batch))
                    part.log.roll()  # a closed segment more, whose file each refresh checks

        await manager.run_io(fill)

        async def old_round() -> None:
            for part in parts:
                await manager.run_io(part.refresh)

        time.sleep(1.1)  # the directories' mtimes settle (partitions.REFRESH_SETTLED_NS)
        await manager.refresh_all()  # the first round looks at each and notes its mtime
        rounds: dict[str, list[float]] = {"refresh_all": [], "old": []}
        writer_busy: list[float] = []
        for _ in range(repeat):
            for name, call in (("refresh_all", manager.refresh_all), ("old", old_round)):
                started = time.perf_counter()
                await call()
                rounds[name].append(time.perf_counter() - started)
            busy_before = time.thread_time()
            for part in parts:
                part.refresh()
            writer_busy.append(time.thread_time() - busy_before)
        await manager.close()
    refresh_ms = statistics.median(rounds["refresh_all"]) * 1000
    old_ms = statistics.median(rounds["old"]) * 1000
    busy_ms = statistics.median(writer_busy) * 1000
    return {"bench": "refresh", "partitions": partitions, "segments": segments, "rounds": repeat,
            "refresh_all_round_ms": round(refresh_ms, 2), "old_round_ms": round(old_ms, 1),
            "old_refresh_cpu_ms": round(busy_ms, 1),
            "old_refresh_us_per_partition": round(busy_ms * 1000 / partitions, 1),
            "ratio": round(refresh_ms / old_ms, 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--segments", type=int, default=2, help="closed segments per partition")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    # Every open log holds its files open: the soft limit (often 1,024) up to the hard one.
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    load_before = round(os.getloadavg()[0], 1)
    result = asyncio.run(run(args.partitions, args.segments, args.repeat))
    result.update({"load_before": load_before, "load_after": round(os.getloadavg()[0], 1)})
    print(f"{args.partitions} partitions, none changed: refresh_all {result['refresh_all_round_ms']} ms a round; "
          f"the old round {result['old_round_ms']} ms ({result['old_refresh_cpu_ms']} ms of its refreshes' CPU, "
          f"{result['old_refresh_us_per_partition']} us a partition)")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
