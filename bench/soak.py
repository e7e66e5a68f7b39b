"""A bounded fault-injection soak on loopback (Jepsen-style): idempotent and transactional
producers, a consumer group, and ingest / compaction / retention in a Spark process, while kill -9
hits the broker and the lake process at random moments; then a checker verifies the log, the
Delta tables and the group offsets against what every client was told.

    python bench/soak.py --minutes 10
    python bench/soak.py --minutes 2 --seed 1234 --work /tmp/soak   # replay a seed, keep the files

It prints the figures (records acknowledged, faults injected, lost, duplicated, the longest
unavailability after a broker kill) and every check; the exit status is 1 when a check fails.
The last line is one JSON object. The machinery is tests/integration/soak/ (the test suite runs a
short version: tests/integration/test_soak.py).

    python bench/soak.py --cluster --minutes 10   # 3 brokers on one root, 3 ZooKeeper nodes
    python bench/soak.py --bucket --minutes 10    # one broker on an object-store root (versitygw)

--cluster adds to the faults SIGSTOP/SIGCONT of a leader (shorter and longer than the session
timeout) and kill -9 of a ZooKeeper node; broker faults strike the leader of a random partition.
It also prints offsets acknowledged twice, the longest unavailability of each partition, and the
failover times (fault -> every partition the broker led acknowledging a record produced after it).
--bucket runs one broker on an object-store root (a versitygw of the run's own, the bucket fault
tests' settings: flush 100 ms, seal 1.5 s, lease 2 s); kill -9 and a restart that takes every
partition over from the bucket; the checker reads the log from the bucket. It implies --no-lake
(the lake process compacts, which a bucket root does not serve yet).
--no-lake leaves out the Spark process (its ingest, compaction, retention and their kills);
--no-transactions the transactional producer.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.soak.cluster import ClusterShape
from tests.integration.soak.run import SoakConfig, run_soak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--rate", type=float, default=SoakConfig.rate, help="records/s of each idempotent producer")
    parser.add_argument("--txn-rate", type=float, default=SoakConfig.txn_rate)
    parser.add_argument("--work", type=Path, default=None, help="keep the storage root, ledger and logs here")
    parser.add_argument("--cluster", action="store_true", help="3 brokers and a 3-node ZooKeeper on one root")
    parser.add_argument("--bucket", action="store_true", help="one broker on an object-store root (versitygw)")
    parser.add_argument("--no-lake", action="store_true", help="no Spark process (ingest, compaction, retention)")
    parser.add_argument("--no-transactions", action="store_true", help="no transactional producer")
    args = parser.parse_args()
    if args.bucket and args.cluster:
        parser.error("--bucket with --cluster is not built into the soak yet")
    seed = args.seed if args.seed is not None else random.randrange(10**6)
    with tempfile.TemporaryDirectory(prefix="topiclake-soak-") as tmp:
        work = args.work or Path(tmp)
        report = run_soak(SoakConfig(work=work, duration_s=args.minutes * 60, seed=seed, rate=args.rate,
                                     txn_rate=args.txn_rate, cluster=ClusterShape() if args.cluster else None,
                                     lake=not (args.no_lake or args.bucket), transactions=not args.no_transactions,
                                     bucket=args.bucket))
        print(report.format())
        if not report.passed and args.work is None:
            print(f"(rerun with --seed {seed} --work DIR to keep the files)")
    v = report.verdict
    figures = {"seed": seed, "minutes": args.minutes, "cluster": args.cluster, "bucket": args.bucket,
               "acknowledged": sum(report.acknowledged.values()),
               "broker_kills": report.kills("broker"), "ingest_kills": report.kills("lake"),
               "lost": v.lost, "duplicated": v.duplicated, "offsets_reused": v.offsets_reused,
               "longest_unavailability_s": round(max([*report.unavailability_s, *report.partition_gaps.values()],
                                                     default=0.0), 2)}
    if args.cluster:
        figures.update({"leader_pauses": report.kills("pause"), "zookeeper_kills": report.kills("zookeeper"),
                        "longest_unavailability_per_partition_s": {k: round(t, 2) for k, t in
                                                                   sorted(report.partition_gaps.items())}})
        for kind, times in report.failovers.items():
            name = "kill" if kind.startswith("kill") else "pause"
            figures[f"failover_{name}_median_s"] = round(statistics.median(times), 2) if times else None
            figures[f"failover_{name}_max_s"] = round(max(times), 2) if times else None
    print(json.dumps({**figures, "passed": report.passed}))
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
