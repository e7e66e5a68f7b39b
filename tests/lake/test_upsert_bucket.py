"""Upsert tables on an object-store root, on the real versitygw: a compacted topic's log in the
bucket (a sealed segment and flush objects, as leaders write them) merged into an upsert table on
the same bucket, one row per key, tombstones remembered in the bucket, the group's offsets in the
merge's commit, exactly once across a run killed -9 at its commit; the staging objects of this run
and of runs killed long ago removed from the bucket."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id
from topiclake.store.objects import ObjectStore

from tests.support.bucket_log import BucketPartitionWriter, create_topic
from tests.support.lake import ingest_killed_at_commit

TOPIC = "users"
GROUP = "topiclake-ingest-users"
STAGING = f"tables/{TOPIC}/_topiclake_staging"


def upsert_rows(root) -> tuple[object, dict[bytes, bytes]]:
    from deltalake import DeltaTable

    table = DeltaTable(root.uri("tables", TOPIC), storage_options=root.delta_storage_options())
    data = table.to_pyarrow_table()
    keys = data["key"].to_pylist()
    assert len(keys) == len(set(keys)), "one row per key"
    return table, dict(zip(keys, data["value"].to_pylist()))


def latest(*changes: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    """Per key its last value (partition by partition, in order), deleted keys left out."""
    out: dict[bytes, bytes | None] = {}
    for part in changes:
        for key, value in part:
            out[key] = value
    return {k: v for k, v in out.items() if v is not None}


def keys_under(store: ObjectStore, prefix: str) -> list[str]:
    """The objects under `prefix`, but for empty "directory" markers (pyarrow's)."""
    return [info.key for info in store.list(prefix) if info.size]


def compacted_log(store: ObjectStore) -> tuple[BucketPartitionWriter, list, list]:
    """Partition 0: a sealed segment, then flush objects; partition 1: flush objects of other keys."""
    create_topic(store, TOPIC, 2, {"cleanup.policy": "compact"})
    first = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"d", b"1"), (b"c", None)]
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()
    writer.flush_changes(first[:4])
    writer.seal()
    writer.flush_changes(first[4:])
    other = [(b"x", b"1"), (b"y", b"1"), (b"x", b"2")]
    BucketPartitionWriter(store, TOPIC, 1).take_over().flush_changes(other)
    return writer, first, other


def test_a_compacted_topic_on_a_bucket_becomes_an_upsert_table_exactly_once(spark, s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    writer, first, other = compacted_log(store)
    options = IngestOptions(topics=(TOPIC,), root=root, target_task_bytes=100)
    result = ingest(spark, options)
    (outcome,) = result.tables
    assert outcome.version == 0 and outcome.merge is not None
    table, rows = upsert_rows(root)
    assert rows == latest(first, other) == {b"a": b"2", b"b": b"1", b"d": b"1", b"x": b"2", b"y": b"1"}
    assert table.metadata().configuration["topiclake.kind"] == "upsert"
    assert table.metadata().partition_columns == ["key_bucket"]
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == 6  # the offsets in the merge's commit
    assert table.transaction_version(app_id(GROUP, TOPIC, 1)) == 3
    assert not keys_under(store, STAGING), "the run's staging objects are gone"
    created = table.version()  # the creating commit, and the kind's properties in a second one

    # Deletes of held keys are remembered in the bucket: an older change of a deleted key arriving
    # later from another partition (partition 1's timestamps are older) must not bring it back.
    second = [(b"b", b"2"), (b"a", None), (b"e", b"1")]
    writer.flush_changes(second)
    again = ingest(spark, options)
    assert again.tables[0].version == created + 1 and again.tables[0].merge.deleted == 1
    assert any("_topiclake_tombstones/" in key for key in keys_under(store, f"tables/{TOPIC}"))
    late = [(b"a", b"stale")]
    BucketPartitionWriter(store, TOPIC, 1).take_over().flush_changes(late)
    third = ingest(spark, options)
    assert third.tables[0].version == created + 2
    table, rows = upsert_rows(root)
    assert rows == {b"b": b"2", b"d": b"1", b"e": b"1", b"x": b"2", b"y": b"1"}, "the stale change lost"
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == 9
    assert table.transaction_version(app_id(GROUP, TOPIC, 1)) == 4
    assert ingest(spark, options).tables[0].version is None, "a rerun commits nothing"
    assert upsert_rows(root)[0].version() == created + 2 and not keys_under(store, STAGING)


def test_an_upsert_ingest_killed_at_its_commit_commits_nothing_and_its_staging_goes_later(s3_server, s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    _writer, first, other = compacted_log(store)
    env = {**os.environ, **s3_root.env}
    child = ingest_killed_at_commit(root, TOPIC, env)
    assert child.returncode == -9, child.stderr[-3000:]
    staged = keys_under(store, STAGING)
    assert staged, "the killed run left its staging objects"
    assert not any("_delta_log" in key for key in keys_under(store, f"tables/{TOPIC}"))

    cli = subprocess.run([sys.executable, "-m", "topiclake.cli", "ingest", "--data", str(root), "--topic", TOPIC,
                          "--bootstrap", "none"], env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "version 0" in cli.stdout and "upsert:" in cli.stdout
    table, rows = upsert_rows(root)
    assert rows == latest(first, other)
    assert table.transaction_version(app_id(GROUP, TOPIC, 0)) == 6
    assert keys_under(store, STAGING) == staged, "a killed run's staging stays a day: it might be a live run's"

    day_ago = time.time() - 25 * 3600  # the objects aged on the server's disk (versitygw's posix backend)
    for key in staged:
        os.utime(s3_server.data_dir / root.bucket / root.key(key), (day_ago, day_ago))
    cli = subprocess.run([sys.executable, "-m", "topiclake.cli", "ingest", "--data", str(root), "--topic", TOPIC,
                          "--bootstrap", "none"], env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "no commit (nothing new)" in cli.stdout
    assert not keys_under(store, STAGING), "the next run removed the killed run's staging objects"
    assert upsert_rows(root)[0].version() == table.version()
