"""`topiclake retain` on an object-store root (real versitygw): the directory root's retention rules
over the newest manifest, applied as one manifest commit that drops whole closed segments and
raises the log start offset; a dry run commits nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import load_newest
from topiclake.objectlog.reader import read_log
from topiclake.store.objects import ObjectStore

from tests.support.bucket_log import BucketPartitionWriter, create_topic

TOPIC = "old"
KEYS = PartitionKeys(TOPIC, 0)


def retain(root, env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topiclake.cli", "retain", "--data", str(root), "--topic", TOPIC,
                           *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)


def test_retention_drops_whole_segments_with_a_manifest_commit(s3_root):
    root, store = s3_root.root, ObjectStore(s3_root.root)
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()
    for _ in range(3):  # three closed segments of offsets [0, 4), [4, 8), [8, 12)
        writer.flush(2, tag="v")
        writer.seal()
    writer.flush(1, tag="v")  # the tail: offsets 12-13
    before = load_newest(store, KEYS)
    sizes = [entry.size for entry in before.segments]
    tail = store.head(KEYS.flush(12, 0)).size
    # retention.bytes that the two oldest segments breach (Kafka counts the active segment too)
    create_topic(store, TOPIC, 1, {"retention.bytes": str(sizes[2] + tail), "retention.ms": "-1"})

    dry = retain(root, s3_root.env, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would delete 2 segments" in dry.stdout and "log start offset would be 8" in dry.stdout
    assert load_newest(store, KEYS) == before

    real = retain(root, s3_root.env)
    assert real.returncode == 0, real.stderr
    assert "deleted 2 segments" in real.stdout and "log start offset 8" in real.stdout
    after = load_newest(store, KEYS)
    assert after.version == before.version + 1 and after.leader_epoch == before.leader_epoch
    assert [e.base_offset for e in after.segments] == [8] and after.log_start_offset == 8
    assert after.end_offset == before.end_offset == 12
    assert [b.base_offset for b in read_log(store, KEYS)] == [8, 10, 12]
    again = retain(root, s3_root.env)
    assert again.returncode == 0 and "deleted 0 segments" in again.stdout
    assert load_newest(store, KEYS) == after
