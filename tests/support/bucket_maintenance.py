"""Maintenance commands on a bucket root run as a user would (`topiclake retain`, `topiclake
merge-segments`, in the AWS environment of the test's versitygw), and what the broker answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.support.paths import REPO


def topiclake(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`topiclake ARGS` in a new process (the environment holds the server and keys)."""
    return subprocess.run([sys.executable, "-m", "topiclake.cli", *args], env=dict(os.environ), cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(ListOffsets EARLIEST, LATEST) of a partition, as a Kafka client asks them."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30, cached=False)
    finally:
        consumer.close()


def wait_earliest(bootstrap: str, topic: str, expected: int, timeout: float = 30.0, partition: int = 0) -> int:
    """Until ListOffsets EARLIEST says `expected` (the broker polls the manifest); what it said last."""
    deadline = time.monotonic() + timeout
    while True:
        low, _high = watermarks(bootstrap, topic, partition)
        if low == expected or time.monotonic() > deadline:
            return low
        time.sleep(0.5)
