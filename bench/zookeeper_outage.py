"""A ZooKeeper outage under load: what the brokers acknowledge while no ZooKeeper node runs, and
whether anything acknowledged is lost (docs/CLUSTER.md, "Sessions").

Three `topiclake broker start` processes in cluster mode over a 3-node ZooKeeper; an idempotent
acks=all confluent-kafka producer sends --rate records/s round robin to a topic of --partitions
partitions; every ZooKeeper node is stopped for --outage-s seconds, then started again on its
ports; after --settle-s more, every acknowledged record is read back at its offset
(tests/cluster/outage.py, which tests/cluster/test_zookeeper_outage.py runs too).

    python bench/zookeeper_outage.py [--outage-s 15] [--rounds 1] [--session-timeout-ms 2000]

The last line is one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topiclake.broker.cluster.ensemble import Ensemble
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.cluster.outage import zookeeper_outage
from tests.support.cluster_topics import create_topic


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage-s", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=200.0, help="records/s produced")
    parser.add_argument("--session-timeout-ms", type=int, default=2000)
    parser.add_argument("--settle-s", type=float, default=5.0)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="zk-outage-") as work, Ensemble(Path(work) / "zk", 3) as ensemble:
        settings = cluster_settings(ensemble.connect_string, f"/outage-{uuid.uuid4().hex[:8]}",
                                    session_timeout_ms=args.session_timeout_ms)
        with ClusterBrokers(Path(work) / "brokers", settings) as brokers:
            create_topic(brokers, "outage", args.partitions)
            for n in range(args.rounds):
                outage = zookeeper_outage(ensemble, brokers, "outage", args.partitions, args.outage_s,
                                          rate=args.rate, settle_s=args.settle_s)
                rounds.append(dataclasses.asdict(outage))
                print(f"round {n + 1}: {args.outage_s:.0f} s without ZooKeeper: acknowledged {outage.acked_before} "
                      f"before, {outage.acked_during} during, {outage.acked_after} after; lost {outage.lost}, "
                      f"offsets reused {outage.offsets_reused}, delivery errors {outage.delivery_errors}; longest "
                      f"gap between acknowledgements {outage.longest_gap_s:.2f} s; kazoo log lines per broker "
                      f"{outage.kazoo_lines}, all log lines {outage.log_lines}", flush=True)
    print(json.dumps({"outage_s": args.outage_s, "rate": args.rate, "partitions": args.partitions,
                      "session_timeout_ms": args.session_timeout_ms, "rounds": rounds}))
    return 0 if all(r["lost"] == 0 and r["offsets_reused"] == 0 for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
