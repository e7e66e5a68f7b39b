"""The soak's object-store root: a versitygw of its own, a bucket, and the broker on it with a
cache directory (bench/soak.py --bucket). The broker killer restarts it on the same cache, whose
contents the takeover never trusts; the checker reads the log from the bucket as a new broker
would (objectlog's reader), not from the cache."""

from __future__ import annotations

import os
from pathlib import Path

from topiclake.lake.log.roots import BucketLog
from topiclake.store.objects import ObjectStore
from topiclake.store.root import parse_root

from tests.support.broker_process import BrokerProcess
from tests.support.bucket_broker import BucketBrokers
from tests.support.s3 import VersityGW

from . import check


class BucketSoakRoot:
    def __init__(self, work: Path):
        self.server = VersityGW(work / "s3").start()
        os.environ.update(self.server.env())  # the broker processes and this one reach the same bucket
        self.url = f"s3://{self.server.create_bucket('soak')}/data"
        self.root = parse_root(self.url)
        # the bucket fault tests' quick settings: flush 100 ms, seal 1.5 s, lease 2 s
        self.brokers = BucketBrokers(work, self.root)

    def start_broker(self) -> BrokerProcess:
        return self.brokers.start("broker", timeout=120)

    def configs(self, topics) -> dict:
        log = BucketLog(self.root)
        return {t.name: log.topic(t.name).log_config for t in topics.values()}

    def read_logs(self, topics) -> dict[tuple[str, int], check.PartitionLog]:
        store = ObjectStore(self.root)
        return {(t.name, p): check.read_bucket_partition_log(store, t.name, p)
                for t in topics.values() for p in range(t.partitions)}
