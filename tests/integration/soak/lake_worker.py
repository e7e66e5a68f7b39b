"""The soak's lake process: one local Spark application running, until it is killed, what
`topiclake ingest`, `topiclake compact` and `topiclake retain` run (the same library calls),
the way a scheduler would: ingest every few seconds, compaction and retention in between.

    python -m tests.integration.soak.lake_worker --root R --topics a,b --protect-groups g1,g2 \
        [--bootstrap host:port] [--pause-s 2] [--master local[1]]

It tells the soak what it is doing on stdout, one line each: `READY` (Spark is up), `PHASE
<name> <cycle>` before each step, `DONE <name> <figures> <seconds>` or `FAILED <name> <error>`
after it. A line `final` on stdin makes it finish its cycle, run one last ingest without
mirroring (the broker is down by then), print `FINAL <records>` and exit; end of stdin (the soak
is gone) makes it exit at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path


def say(line: str) -> None:
    print(line, flush=True)


def step(name: str, cycle: int, work) -> None:
    """Run one step; its failure is reported and the loop goes on, as a scheduled job's would."""
    say(f"PHASE {name} {cycle}")
    started = time.monotonic()
    try:
        figures = work()
    except Exception as exc:  # noqa: BLE001  (reported to the soak, which judges the end state)
        say(f"FAILED {name} {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
        return
    say(f"DONE {name} {figures} {time.monotonic() - started:.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--topics", required=True)
    parser.add_argument("--protect-groups", default="")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--pause-s", type=float, default=2.0)
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--target-task-bytes", type=int, default=64 * 1024)
    args = parser.parse_args(argv)

    from topiclake.lake.runs.compaction import CompactOptions, compact
    from topiclake.lake.runs.ingest import IngestOptions, ingest
    from topiclake.lake.runs.retention import RetentionOptions, retain
    from topiclake.lake.spark.session import get_session

    topics = tuple(t for t in args.topics.split(",") if t)
    spark = get_session("topiclake-soak", master=args.master, conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    finish = threading.Event()

    def read_commands():
        for line in sys.stdin:
            if line.strip() == "final":
                finish.set()
        if not finish.is_set():
            os._exit(3)  # the soak went away

    threading.Thread(target=read_commands, daemon=True).start()
    say("READY")

    def run_ingest(bootstrap):
        # append tables whatever the cleanup.policy: the checker compares every row with the log
        result = ingest(spark, IngestOptions(topics=topics, root=args.root, bootstrap=bootstrap, kind="append",
                                             target_task_bytes=args.target_task_bytes))
        return f"{result.records}"

    def run_compact():
        result = compact(spark, CompactOptions(root=args.root))  # every compacted topic, as the DAG does
        return f"{len(result.cleaned)}"

    def run_retain():
        result = retain(RetentionOptions(root=args.root, protect_groups=tuple(
            g for g in args.protect_groups.split(",") if g)))
        if result.errors:
            raise RuntimeError("; ".join(result.errors))
        return f"{sum(len(p.deleted) for p in result.partitions)}"

    cycle = 0
    while not finish.is_set():
        step("ingest", cycle, lambda: run_ingest(args.bootstrap))
        step("compact", cycle, run_compact)
        step("retain", cycle, run_retain)
        cycle += 1
        finish.wait(args.pause_s)
    say("PHASE final 0")
    result = ingest(spark, IngestOptions(topics=topics, root=args.root, bootstrap="none",
                                         target_task_bytes=args.target_task_bytes))
    say(f"FINAL {result.records}")
    spark.stop()


if __name__ == "__main__":
    main()
