"""The commit protocol on real Delta tables (no Spark needed)."""

from __future__ import annotations

import pytest

from topiclake.lake.errors import ConcurrentWriterError
from topiclake.lake.table import delta
from topiclake.lake.table.schema import table_schema

from tests.support.lake import read_table

SCHEMA = table_schema()
PART = ["record_date"]


def commit(uri, *updates, group="g"):
    return delta.commit(str(uri), group=group, actions=[], offsets=list(updates), schema=SCHEMA,
                        partition_by=PART, metadata={"topiclake": {"operation": "test"}})


def test_offsets_are_txn_versions_and_survive_checkpoints(tmp_path):
    uri = tmp_path / "t"
    assert commit(uri, delta.OffsetUpdate("t", 0, None, 5), delta.OffsetUpdate("t", 1, None, 0)) == 0
    for i in range(11):
        commit(uri, delta.OffsetUpdate("t", 0, 5 + i, 6 + i))
    delta.load_table(str(uri)).create_checkpoint()
    assert commit(uri, delta.OffsetUpdate("t", 0, 16, 17)) == 12
    for name in (f"{v:020d}.json" for v in range(11)):  # what log clean-up removes, in effect
        (uri / "_delta_log" / name).unlink()
    table = delta.load_table(str(uri))
    assert delta.committed_offsets(table, "g", [("t", 0), ("t", 1), ("t", 2)]) == {
        ("t", 0): 17, ("t", 1): 0, ("t", 2): None}


def test_a_writer_that_moved_the_offsets_first_wins(tmp_path):
    uri = tmp_path / "t"
    commit(uri, delta.OffsetUpdate("t", 0, None, 5))
    commit(uri, delta.OffsetUpdate("t", 0, 5, 9))  # the other writer, after we planned from 5
    with pytest.raises(ConcurrentWriterError, match=r"t/0: planned from 5, now 9"):
        commit(uri, delta.OffsetUpdate("t", 0, 5, 7))
    assert delta.load_table(str(uri)).transaction_version(delta.app_id("g", "t", 0)) == 9


def test_other_partitions_and_groups_do_not_conflict(tmp_path):
    uri = tmp_path / "t"
    commit(uri, delta.OffsetUpdate("t", 0, None, 5))
    commit(uri, delta.OffsetUpdate("t", 1, None, 3), group="other")
    commit(uri, delta.OffsetUpdate("t", 0, 5, 6))
    table = delta.load_table(str(uri))
    assert table.version() == 2 and table.transaction_version(delta.GUARD_APP_ID) == 3


def test_stale_snapshot_commit_fails_because_of_the_guard(tmp_path):
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, Transaction

    uri = tmp_path / "t"
    commit(uri, delta.OffsetUpdate("t", 0, None, 5))
    stale = DeltaTable(str(uri))
    commit(uri, delta.OffsetUpdate("t", 1, None, 1))
    with pytest.raises(CommitFailedError):
        stale.create_write_transaction([], mode="append", schema=stale.schema(), partition_by=PART,
                                       commit_properties=CommitProperties(app_transactions=[
                                           Transaction(delta.GUARD_APP_ID, 2)]))


def test_offsets_never_go_back(tmp_path):
    with pytest.raises(ValueError, match="go back from 9 to 3"):
        commit(tmp_path / "t", delta.OffsetUpdate("t", 0, 9, 3))


def _bucket_file(uri, bucket: int, name: str, table):
    """A data file in key bucket `bucket`, written by pyarrow, as its AddAction."""
    import json

    import pyarrow.parquet as pq

    (uri / f"key_bucket={bucket}").mkdir(parents=True, exist_ok=True)
    path = f"key_bucket={bucket}/{name}.parquet"
    pq.write_table(table, uri / path)
    return delta.add_action({"path": path, "size": (uri / path).stat().st_size, "modification_time": 0,
                             "partition_values": json.dumps({"key_bucket": str(bucket)}),
                             "stats": json.dumps({"numRecords": table.num_rows})})


def test_a_commit_that_grows_the_schema_replaces_whole_buckets_and_nothing_else(tmp_path):
    """An upsert merge that adds columns (a CDC table's new field): delta-rs writes a schema only in
    an overwrite, which takes no remove actions; it overwrites exactly the buckets the merge rewrites."""
    import pyarrow as pa
    from deltalake.transaction import RemoveAction

    uri = tmp_path / "t"
    old = pa.schema([("id", pa.int64())])
    new = old.append(pa.field("phone", pa.string()))
    files = [_bucket_file(uri, b, n, pa.table({"id": [i]}, schema=old)) for b, n, i in ((0, "a", 1), (1, "b", 2),
                                                                                        (1, "c", 3), (2, "e", 4))]
    part = pa.field("key_bucket", pa.int32())
    delta.commit(str(uri), group="g", actions=files, offsets=[], schema=old.append(part), partition_by=["key_bucket"],
                 metadata={})

    def merge(removed, bucket):
        merged = _bucket_file(uri, bucket, f"m{bucket}", pa.table({"id": [9], "phone": ["+41"]}, schema=new))
        removes = [RemoveAction(f.path, True, 0, f.size, f.partition_values) for f in removed]
        return delta.commit(str(uri), group="g", actions=removes + [merged], offsets=[], schema=new.append(part),
                            partition_by=["key_bucket"], metadata={}, evolve=True)

    with pytest.raises(ConcurrentWriterError, match=r"key_bucket \['1'\] are not the ones this commit replaces"):
        merge([files[1]], 1)  # bucket 1 holds c too: the overwrite would remove a file not planned
    merge(files[1:3], 1)
    table, data = read_table(uri)
    assert sorted(p.split("/")[-1] for p in table.file_uris()) == ["a.parquet", "e.parquet", "m1.parquet"]
    assert [f.name for f in table.schema().fields] == ["id", "phone", "key_bucket"]
    rows = sorted(data.to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["phone"]) for r in rows] == [(1, None), (4, None), (9, "+41")]


def _racing_creators(uri: str, writers: int = 4):
    """`writers` threads each committing a table's first offsets at once; the versions they got (few
    enough that the last one wins within delta.MAX_ATTEMPTS)."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Barrier

    start = Barrier(writers)

    def create(partition: int) -> int:
        start.wait()
        return delta.commit(uri, group="g", actions=[], offsets=[delta.OffsetUpdate("t", partition, None, 1)],
                            schema=SCHEMA, partition_by=PART, metadata={"topiclake": {"operation": "test"}})

    with ThreadPoolExecutor(writers) as pool:
        return sorted(pool.map(create, range(writers)))


def test_writers_racing_to_create_a_table_all_commit_once_and_version_0_reads_as_a_write(tmp_path):
    uri = str(tmp_path / "t")
    assert _racing_creators(uri) == list(range(4))  # one created it, the others committed on top
    table = delta.load_table(uri)
    assert delta.committed_offsets(table, "g", [("t", p) for p in range(4)]) == {("t", p): 1 for p in range(4)}
    created = table.history()[-1]
    assert (created["version"], created["operation"]) == (0, "WRITE")
    assert created["operationParameters"] == {"mode": "ErrorIfExists", "partitionBy": '["record_date"]'}
    assert [p.name for p in (tmp_path / "t" / "_delta_log").iterdir() if p.name.startswith(".")] == []


def test_writers_racing_to_create_a_table_in_a_bucket(s3_root):
    root = s3_root.root
    delta.serve_root(root)
    uri = root.uri("tables", "created")
    assert _racing_creators(uri) == list(range(4))
    table = delta.load_table(uri, root.delta_storage_options())
    assert delta.committed_offsets(table, "g", [("t", p) for p in range(4)]) == {("t", p): 1 for p in range(4)}
    assert table.history()[-1]["operation"] == "WRITE"
