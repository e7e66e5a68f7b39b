"""Upsert tables end to end on real segment files, real Spark and real Delta tables read back with
deltalake: one row per key (its newest value), tombstones delete, the kind is recorded and never
changes on its own, the merge is exactly once (an older offset never wins, a concurrent writer's
DELETE between planning and commit stops the run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pyarrow.compute as pc
import pytest

from topiclake.lake.errors import ConcurrentWriterError
from topiclake.lake.keyed.table_kind import KindMismatchError, TableSettings
from topiclake.lake.runs import ingest as ingest_module
from topiclake.lake.runs.backfill import BackfillOptions, backfill, format_result
from topiclake.lake.runs.ingest import format_summary
from topiclake.lake.runs.rebuild import RebuildOptions, rebuild
from topiclake.lake.table.delta import app_id
from topiclake.segments.storage import StorageLayout

from tests.support.lake import BASE_TS, read_table
from tests.lake.upserts import run, compacted, table_rows


def latest(changes: list[tuple[bytes, bytes | None]]) -> dict[bytes, bytes]:
    """The expected table: per key its last value, deleted keys left out."""
    out: dict[bytes, bytes | None] = {}
    for key, value in changes:
        out[key] = value
    return {k: v for k, v in out.items() if v is not None}


def produce(writer, partition, changes):
    writer.produce(partition, [v for _k, v in changes], keys=[k for k, _v in changes])


def test_latest_value_per_key_tombstones_delete_and_the_kind_is_recorded(spark, root, topic_writer):
    w = compacted(topic_writer, root, "users")
    first = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1"), (b"d", b"1"), (b"c", None)]
    produce(w, 0, first)
    uri = root / "tables" / "users"
    result = run(spark, root, "users")  # compact -> upsert by default
    assert result.tables[0].version == 0
    assert table_rows(uri) == latest(first) == {b"a": b"2", b"b": b"1", b"d": b"1"}
    table, data = read_table(uri)
    config = table.metadata().configuration
    assert config["topiclake.kind"] == "upsert" and config["topiclake.valueFormat"] == "raw"
    assert config["topiclake.buckets"] == "16" and json.loads(config["topiclake.keyColumns"]) == ["key"]
    assert table.metadata().partition_columns == ["key_bucket"]
    row = data.filter(pc.equal(data["key"], b"a")).to_pylist()[0]
    assert (row["topic"], row["partition"], row["offset"]) == ("users", 0, 2) and row["timestamp"] is not None
    assert table.transaction_version(app_id("topiclake-ingest-users", "users", 0)) == 6

    second = [(b"b", b"2"), (b"a", None), (b"e", b"1"), (b"c", b"again")]
    produce(w, 0, second)
    summary = format_summary(run(spark, root, "users"))
    assert "touched key buckets rewritten" in summary and "users-0: offsets [6, 10) 4 records" in summary
    assert table_rows(uri) == latest(first + second) == {b"b": b"2", b"c": b"again", b"d": b"1", b"e": b"1"}
    table, _ = read_table(uri)
    assert table.version() == 2 and table.transaction_version(app_id("topiclake-ingest-users", "users", 0)) == 10
    assert not (uri / "_topiclake_staging").exists() or not any((uri / "_topiclake_staging").iterdir())

    again = run(spark, root, "users")  # nothing new: no commit
    assert again.tables[0].version is None and read_table(uri)[0].version() == 2


def test_only_touched_buckets_are_rewritten_and_the_table_is_read_by_delta_spark(spark, root, topic_writer):
    w = compacted(topic_writer, root, "kv")
    changes = [(b"key-%d" % i, b"v0") for i in range(200)]
    produce(w, 0, changes)
    uri = root / "tables" / "kv"
    run(spark, root, "kv")
    before = set(read_table(uri)[0].file_uris())
    update = [(b"key-7", b"v1")]
    produce(w, 0, update)
    run(spark, root, "kv")
    after = set(read_table(uri)[0].file_uris())
    assert len(before - after) == 1 and len(after - before) == 1  # one bucket rewritten, the others kept
    rows = spark.read.format("delta").load(str(uri)).select("key", "value").collect()
    assert {bytes(r["key"]): bytes(r["value"]) for r in rows} == latest(changes + update)


def test_an_older_offset_never_overwrites_a_newer_one_and_backfill_is_idempotent(spark, root, topic_writer):
    w = compacted(topic_writer, root, "acct")
    changes = [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"b", None), (b"c", b"1"), (b"a", b"3")]
    produce(w, 0, changes)
    uri = root / "tables" / "acct"
    run(spark, root, "acct")
    expected = latest(changes)
    for lo, hi in [(0, 3), (0, 3), (1, 2), (0, 6)]:  # old ranges: a key never moves back, b never returns
        result = backfill(spark, BackfillOptions(root=root, table="acct", topic="acct", partition=0,
                                                 from_offset=lo, to_offset=hi))
        assert result.version is None or result.version > 0
        assert "replayed from 0 to the committed offset 6" in format_result(result) or lo > 0
        assert table_rows(uri) == expected, (lo, hi)
    table, data = read_table(uri)
    assert table.transaction_version(app_id("topiclake-ingest-acct", "acct", 0)) == 6  # the offsets do not move
    assert data.filter(pc.equal(data["key"], b"a"))["offset"].to_pylist() == [5]


def test_cross_partition_tie_rule(spark, root, topic_writer):
    w = compacted(topic_writer, root, "moves", partitions=2)
    w.produce(0, [b"old"], keys=[b"k"], timestamp=1_714_521_600_000)
    w.produce(1, [b"new"], keys=[b"k"], timestamp=1_714_521_700_000)  # newer timestamp, other partition
    w.produce(0, [b"x"], keys=[b"j"], timestamp=1_714_521_900_000)
    w.produce(1, [b"y"], keys=[b"j"], timestamp=1_714_521_800_000)
    uri = root / "tables" / "moves"
    run(spark, root, "moves")
    assert table_rows(uri) == {b"k": b"new", b"j": b"x"}


def test_kind_comes_from_flags_then_settings_then_cleanup_policy_and_never_changes_silently(spark, root,
                                                                                          topic_writer, capsys):
    w = topic_writer("events")  # cleanup.policy delete
    produce(w, 0, [(b"a", b"1"), (b"a", b"2")])
    run(spark, root, "events")
    table, data = read_table(root / "tables" / "events")
    assert "topiclake.kind" not in table.metadata().configuration and data.num_rows == 2  # append: as before

    run(spark, root, "events", table="events_latest", tables={"events_latest": TableSettings(kind="upsert")})
    assert table_rows(root / "tables" / "events_latest") == {b"a": b"2"}

    with pytest.raises(KindMismatchError) as raised:
        run(spark, root, "events", kind="upsert")
    message = str(raised.value)
    assert "table events is an append table" in message and "`topiclake rebuild events --kind upsert`" in message
    assert read_table(root / "tables" / "events")[0].version() == 0

    from topiclake.lake.jobs.main import ingest_main

    code = ingest_main(["--topic", "events", "--table", "events_latest", "--kind", "append", "--data", str(root)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "events_latest is an upsert table" in err and "topiclake rebuild events_latest --kind append" in err


def test_rebuild_replaces_an_append_table_with_an_upsert_table_atomically(spark, root, topic_writer):
    w = topic_writer("orders")
    changes = [(b"o1", b"new"), (b"o2", b"new"), (b"o1", b"paid"), (b"o2", None), (b"o3", b"new")]
    produce(w, 0, changes)
    uri = root / "tables" / "orders"
    run(spark, root, "orders")
    assert read_table(uri)[1].num_rows == 5

    result = rebuild(spark, RebuildOptions(root=root, table="orders", kind="upsert"))
    table, _ = read_table(uri)
    assert table.metadata().configuration["topiclake.kind"] == "upsert"
    assert table_rows(uri) == latest(changes)
    assert table.transaction_version(app_id("topiclake-ingest-orders", "orders", 0)) == 5
    assert read_table(result.old_location)[1].num_rows == 5  # the old table, kept aside

    produce(w, 0, [(b"o3", b"shipped")])
    run(spark, root, "orders")  # the rebuilt table goes on from its offsets
    assert table_rows(uri) == latest(changes + [(b"o3", b"shipped")])


def test_a_writer_that_removes_a_planned_file_stops_the_merge(spark, root, topic_writer, monkeypatch):
    w = compacted(topic_writer, root, "raced")
    produce(w, 0, [(b"a", b"1"), (b"b", b"1")])
    uri = root / "tables" / "raced"
    run(spark, root, "raced")
    produce(w, 0, [(b"a", b"2"), (b"b", b"2")])
    real = ingest_module.plan_merge

    def merge_then_another_writer_deletes(*args, **kwargs):
        plan = real(*args, **kwargs)
        from deltalake import DeltaTable

        DeltaTable(str(uri)).delete("value = X'31'")  # rewrites or drops the files the merge replaces
        return plan

    monkeypatch.setattr(ingest_module, "plan_merge", merge_then_another_writer_deletes)
    with pytest.raises(ConcurrentWriterError, match="another writer changed the files of key bucket"):
        run(spark, root, "raced")
    table, _ = read_table(uri)
    assert table.transaction_version(app_id("topiclake-ingest-raced", "raced", 0)) == 2  # nothing committed
    monkeypatch.setattr(ingest_module, "plan_merge", real)
    run(spark, root, "raced")
    assert table_rows(uri) == {b"a": b"2", b"b": b"2"}


# The child ingests and is SIGKILLed by itself once the merge wrote its files, before the commit.
KILLED_CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from topiclake.lake.runs import ingest as ing
    from topiclake.lake.spark.session import get_session

    real = ing.plan_merge
    def merge_then_die(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)

    ing.plan_merge = merge_then_die
    spark = get_session("upsert-kill", master="local[1]", conf={"spark.ui.enabled": "false"})
    ing.ingest(spark, ing.IngestOptions(topics=("killed",), root=Path(sys.argv[1])))
""")


def test_a_run_killed_after_its_merge_commits_nothing_and_the_rerun_applies_each_change_once(spark, root,
                                                                                            topic_writer):
    w = compacted(topic_writer, root, "killed")
    first = [(b"k%d" % i, b"1") for i in range(30)]
    produce(w, 0, first)
    uri = root / "tables" / "killed"
    run(spark, root, "killed")
    second = [(b"k%d" % i, b"2" if i % 3 else None) for i in range(0, 30, 2)]
    produce(w, 0, second)

    child = subprocess.run([sys.executable, "-c", KILLED_CHILD, str(root)], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert child.returncode == -9, child.stderr[-3000:]
    table, _ = read_table(uri)
    assert table.version() == 1 and table_rows(uri) == latest(first)  # created, then its properties
    assert any((uri / "_topiclake_staging").iterdir()), "the killed run staged its changes"

    run(spark, root, "killed")
    assert table_rows(uri) == latest(first + second)
    assert read_table(uri)[0].transaction_version(app_id("topiclake-ingest-killed", "killed", 0)) == 45


def test_the_settings_file_names_a_tables_kind_and_buckets_and_bad_values_are_one_line(spark, root, topic_writer,
                                                                                        tmp_path, capsys):
    from topiclake.lake.jobs.main import ingest_main

    w = topic_writer("prices")
    produce(w, 0, [(b"p1", b"1"), (b"p2", b"1"), (b"p1", b"2")])
    settings = tmp_path / "topiclake.toml"
    settings.write_text('[tables.prices]\nkind = "upsert"\nbuckets = 4\n')
    args = ["--topic", "prices", "--data", str(root), "--bootstrap", "none"]
    assert ingest_main(args + ["--config", str(settings)]) == 0
    table, _ = read_table(root / "tables" / "prices")
    assert table.metadata().configuration["topiclake.buckets"] == "4"
    assert table_rows(root / "tables" / "prices") == {b"p1": b"2", b"p2": b"1"}
    capsys.readouterr()

    settings.write_text('[tables.prices]\nkind = "merge"\n')
    assert ingest_main(["--topic", "prices", "--data", str(root), "--config", str(settings)]) == 2
    assert capsys.readouterr().err.strip() == "error: [tables.prices]: kind 'merge' is not one of append, upsert"
    assert ingest_main(["--topic", "prices", "--data", str(root), "--kind", "fast"]) == 2
    assert "--kind: kind 'fast' is not one of append, upsert" in capsys.readouterr().err


def test_a_table_of_topics_with_different_cleanup_policies_needs_one_kind(spark, root, topic_writer):
    compacted(topic_writer, root, "state").produce(0, [b"1", b"3"], keys=[b"a", b"b"], timestamp=BASE_TS + 9000)
    topic_writer("log").produce(0, [b"2", b"4"], keys=[b"a", b"b"], timestamp=BASE_TS + 5000)
    topic_writer("log2").produce(0, [b"5"], keys=[b"b"], timestamp=BASE_TS + 9000)
    with pytest.raises(Exception, match=r"different cleanup policies: log \(append\), state \(upsert\)"):
        run(spark, root, "state", "log", table="mixed")
    run(spark, root, "state", "log", "log2", table="mixed", kind="upsert")
    # a: the newer timestamp wins; b: the same timestamp, the higher (topic, partition, offset) wins
    assert table_rows(root / "tables" / "mixed") == {b"a": b"1", b"b": b"3"}


def test_another_group_merging_into_the_same_buckets_meanwhile_stops_the_merge(spark, root, topic_writer,
                                                                               monkeypatch):
    first, second = compacted(topic_writer, root, "east"), compacted(topic_writer, root, "west")
    first.produce(0, [b"e1", b"e2"], keys=[b"a", b"b"], timestamp=BASE_TS)
    second.produce(0, [b"w1", b"w2"], keys=[b"a", b"b"], timestamp=BASE_TS + 60_000)  # newer
    uri = root / "tables" / "both"
    real = ingest_module.plan_merge
    calls = []

    def merge_while_the_other_group_commits(*args, **kwargs):
        plan = real(*args, **kwargs)
        calls.append(plan)
        if len(calls) == 1:  # the east run planned its buckets; the west run commits to them first
            run(spark, root, "west", table="both", group="west-group")
        return plan

    monkeypatch.setattr(ingest_module, "plan_merge", merge_while_the_other_group_commits)
    with pytest.raises(ConcurrentWriterError, match="another writer changed the files of key bucket"):
        run(spark, root, "east", table="both", group="east-group")
    assert table_rows(uri) == {b"a": b"w1", b"b": b"w2"}  # the west run's commit alone
    run(spark, root, "east", table="both", group="east-group")  # the rerun merges with what is there
    assert table_rows(uri) == {b"a": b"w1", b"b": b"w2"}  # west's changes are newer: they stay
    first.produce(0, [b"e3"], keys=[b"a"], timestamp=BASE_TS + 120_000)
    run(spark, root, "east", table="both", group="east-group")
    assert table_rows(uri) == {b"a": b"e3", b"b": b"w2"}


def test_rebuild_as_a_command_and_back_to_append(spark, root, topic_writer, capsys):
    from topiclake.lake.jobs.main import rebuild_main

    w = compacted(topic_writer, root, "carts")
    changes = [(b"c1", b"1"), (b"c1", b"2"), (b"c2", None)]
    produce(w, 0, changes)
    run(spark, root, "carts")
    uri = root / "tables" / "carts"
    assert table_rows(uri) == {b"c1": b"2"}
    capsys.readouterr()

    assert rebuild_main(["carts", "--data", str(root)]) == 2
    assert capsys.readouterr().err.strip() == "error: rebuild needs --kind append or --kind upsert"
    assert rebuild_main(["carts", "--kind", "append", "--data", str(root), "--bootstrap", "none"]) == 0
    assert "as append (was upsert) from the log: 3 records" in capsys.readouterr().out
    table, data = read_table(uri)
    assert "topiclake.kind" not in table.metadata().configuration  # an append table
    assert sorted(data["offset"].to_pylist()) == [0, 1, 2] and table.metadata().partition_columns == ["record_date"]
    produce(w, 0, [(b"c3", b"1")])
    run(spark, root, "carts")  # the default (cleanup.policy) no longer decides: the table is append now
    assert read_table(uri)[1].num_rows == 4


def test_typed_columns_of_an_upsert_table_and_its_quarantine(spark, root, topic_writer, tmp_path):
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "stock.json").write_text(json.dumps({"fields": {"sku": "string", "count": "long"}}))
    w = compacted(topic_writer, root, "stock")
    w.produce(0, [b'{"sku": "a", "count": 1}', b"not json", b'{"sku": "b", "count": 5}', b'{"sku": "a", "count": 2}',
                  None], keys=[b"a", b"b", b"b", b"a", b"b"])
    run(spark, root, "stock", schemas_dir=schemas)
    table, data = read_table(root / "tables" / "stock")
    assert [(r["key"], r["sku"], r["count"], r["offset"]) for r in data.to_pylist()] == [(b"a", "a", 2, 3)]
    assert "topiclake.kind" in table.metadata().configuration and "count" in data.column_names
    _q, quarantine = read_table(root / "tables" / "stock_quarantine")
    assert quarantine["offset"].to_pylist() == [1] and quarantine["key"].to_pylist() == [b"b"]
    w.produce(0, [b'{"sku": "b", "count": 7}'], keys=[b"b"])
    run(spark, root, "stock", schemas_dir=schemas)
    rows = {r["key"]: r["count"] for r in read_table(root / "tables" / "stock")[1].to_pylist()}
    assert rows == {b"a": 2, b"b": 7}
    assert read_table(root / "tables" / "stock_quarantine")[1]["offset"].to_pylist() == [1]  # not again


def test_records_without_a_key_go_to_the_quarantine_not_into_one_row(spark, root, topic_writer):
    w = compacted(topic_writer, root, "signals")
    w.produce(0, [b"k1", b"n1", b"n2", b"k2", None, b"n3"], keys=[b"a", None, None, b"b", None, None])
    result = run(spark, root, "signals")
    assert table_rows(root / "tables" / "signals") == {b"a": b"k1", b"b": b"k2"}
    _q, quarantine = read_table(root / "tables" / "signals_quarantine")
    assert sorted(quarantine["offset"].to_pylist()) == [1, 2, 4, 5]
    assert set(quarantine["error"].to_pylist()) == {"record has no key; an upsert table keys its rows by the record key"}
    assert "4 records quarantined" in format_summary(result)
    w.produce(0, [b"k3"], keys=[b"a"])
    run(spark, root, "signals")  # the next run quarantines nothing again
    assert table_rows(root / "tables" / "signals") == {b"a": b"k3", b"b": b"k2"}
    assert read_table(root / "tables" / "signals_quarantine")[1].num_rows == 4


def test_a_backfill_that_fails_records_the_quarantine_does_not_hold_stops(spark, root, topic_writer, tmp_path):
    from deltalake import DeltaTable

    from topiclake.lake.errors import LakeError

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / "stock.json").write_text(json.dumps({"fields": {"sku": "string", "count": "long"}}))
    w = compacted(topic_writer, root, "stock")
    w.produce(0, [b'{"sku": "a", "count": 1}', b"not json", b'{"sku": "b", "count": 5}'], keys=[b"a", b"b", b"b"])
    run(spark, root, "stock", schemas_dir=schemas)
    DeltaTable(str(root / "tables" / "stock_quarantine")).delete()  # someone emptied the quarantine
    version = read_table(root / "tables" / "stock")[0].version()
    with pytest.raises(LakeError) as failed:
        backfill(spark, BackfillOptions(root=root, table="stock", topic="stock", partition=0, from_offset=0,
                                        to_offset=3))
    assert "stock-0 offsets [0, 3)" in str(failed.value) and "holds only 0" in str(failed.value)
    assert "\n" not in str(failed.value)
    assert read_table(root / "tables" / "stock")[0].version() == version  # nothing committed


def test_rebuild_refuses_to_lose_rows_retention_deleted_from_the_log_unless_allowed(spark, root, topic_writer,
                                                                                    capsys):
    from topiclake.lake.jobs.main import rebuild_main

    w = topic_writer("visits")
    produce(w, 0, [(b"v1", b"1"), (b"v2", b"1"), (b"v1", b"2")])
    w.roll(0)
    produce(w, 0, [(b"v3", b"1"), (b"v2", b"2")])
    run(spark, root, "visits")
    uri = root / "tables" / "visits"
    version = read_table(uri)[0].version()
    (StorageLayout(root).log_dir("visits", 0) / f"{0:020d}.log").unlink()  # retention: the log starts at 3
    capsys.readouterr()

    args = ["visits", "--kind", "upsert", "--data", str(root), "--bootstrap", "none"]
    assert rebuild_main(args) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "visits-0 starts at offset 3, the table holds rows from offset 0" in err and "--allow-data-loss" in err
    table, data = read_table(uri)
    assert table.version() == version and data.num_rows == 5  # untouched, still append

    assert rebuild_main(args + ["--allow-data-loss"]) == 0
    assert "as upsert (was append)" in capsys.readouterr().out
    assert table_rows(uri) == {b"v3": b"1", b"v2": b"2"}
