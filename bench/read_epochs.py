"""Benchmark: what honouring leader epochs costs the ingest's read path, in one run.

The same records are written twice: once by a single broker (no `leader-epochs/`: today's path,
no batch checked) and once by a cluster leader of epoch 0 (a takeover, then appends stamped with
its epoch: every reader checks every batch against the history). For each, the read path of an
ingest without Spark: planning on the driver (list the segments, scan the batch headers, cut the
tasks) and the executors' decode of every task (segments.arrow, native kernel), in process CPU
time (a machine shared with other work disturbs it far less than wall time), best of --repeat.
"ratio" is the cluster layout's time over the single broker's: the cost of the checks.

    python bench/read_epochs.py                     # 1 million records, 2 partitions
    python bench/read_epochs.py --records 3000000

The last line is one JSON object with every figure measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _data import RECORDS_PER_BATCH, template_batch
from topiclake.lake.log.decode import read_task
from topiclake.lake.log.offsets import EARLIEST, LATEST, parse_offset_spec
from topiclake.lake.log.plan import plan_partition
from topiclake.lake.log.source import list_partition
from topiclake.segments.config import LogConfig
from topiclake.segments.leader_fence import PartitionFence
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry

CONFIG = LogConfig.from_properties({"segment.bytes": str(64 * 1024 * 1024)})
TEMPLATES = 64
TASK_BYTES = 16 * 1024 * 1024


def write(layout: StorageLayout, topic: str, partitions: int, records: int, *, cluster: bool) -> None:
    TopicRegistry(layout).create(topic, partitions)
    templates = [template_batch(i, "none") for i in range(TEMPLATES)]
    batches = records // RECORDS_PER_BATCH
    for p in range(partitions):
        directory = layout.log_dir(topic, p)
        if cluster:  # a takeover, as the broker runs it
            fence = PartitionFence(directory)
            log = Log.open(directory, CONFIG, epochs=fence.begin_takeover(0), create_segment=fence.create_segment)
            log.epochs = fence.record_start(0, log.log_end_offset)
            log.take_over()
        else:
            log = Log.open(directory, CONFIG)
        mine = [i for i in range(batches) if i % partitions == p]
        for start in range(0, len(mine), 64):
            log.append(bytearray(b"".join(templates[i % TEMPLATES] for i in mine[start:start + 64])),
                       leader_epoch=0 if cluster else None)
        log.close()


def read_path(layout: StorageLayout, topic: str, partitions: int) -> tuple[float, float, int]:
    """(planning CPU seconds, decode CPU seconds, records decoded) of one ingest's reads."""
    starting = parse_offset_spec(None, default=EARLIEST, allow_time=True)
    ending = parse_offset_spec(None, default=LATEST, allow_time=False)
    started = time.process_time()
    plans = [plan_partition(list_partition(layout, topic, p), table_uri="unused", committed=None, starting=starting,
                            ending=ending, target_task_bytes=TASK_BYTES) for p in range(partitions)]
    planned = time.process_time()
    records = 0
    for plan in plans:
        for t in plan.tasks:
            task = {"path": t.path, "inode": t.inode, "start": t.start, "end": t.end, "min_offset": t.min_offset,
                    "max_offset": t.max_offset, "aborted": [], "epochs": t.epochs}
            records += read_task(task)[0].num_rows
    return planned - started, time.process_time() - planned, records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=7, help="runs of each layout, interleaved (best kept)")
    args = parser.parse_args()
    figures: dict = {"bench": "read_epochs", "records": args.records, "partitions": args.partitions}
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-epochs-") as tmp:
        layout = StorageLayout(Path(tmp) / "data")
        write(layout, "single", args.partitions, args.records, cluster=False)
        write(layout, "cluster", args.partitions, args.records, cluster=True)
        runs: dict[str, list[tuple[float, float, int]]] = {"single": [], "cluster": []}
        for _ in range(args.repeat):  # interleaved: a change in the machine's load hits both
            for topic in runs:
                runs[topic].append(read_path(layout, topic, args.partitions))
    for topic, measured in runs.items():
        plan_s, decode_s = min(m[0] for m in measured), min(m[1] for m in measured)
        assert all(m[2] == measured[0][2] for m in measured) and measured[0][2] == runs["single"][0][2]
        figures[topic] = {"plan_ms": round(plan_s * 1e3, 2), "decode_ms": round(decode_s * 1e3, 2),
                          "records": measured[0][2]}
        print(f"{topic:8s}: plan {plan_s * 1e3:6.1f} ms, decode {decode_s * 1e3:6.1f} ms "
              f"({measured[0][2] / (plan_s + decode_s) / 1e6:.2f} M records/s, CPU time, best of {args.repeat})")
    single, cluster = figures["single"], figures["cluster"]
    figures["ratio"] = round((cluster["plan_ms"] + cluster["decode_ms"]) / (single["plan_ms"] + single["decode_ms"]), 3)
    figures["plan_ratio"] = round(cluster["plan_ms"] / single["plan_ms"], 3)
    print(f"leader epochs cost: read path x{figures['ratio']:.3f} (planning x{figures['plan_ratio']:.3f})")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
