"""A CDC table's column keeps its type when one event disagrees (issue 31, point 2): Debezium JSON
without the schema wrapper, produced to a real broker; the first run types `balance` bigint; a
later run whose sample holds one event with `"balance": "lots"` sends only that event to the
quarantine and applies every other change, says so instead of "quality passed", reports the
records it read and the rows they changed (issue 31, point 5), and a backfill
of the partition (which samples its range too) leaves the same rows and the same quarantine."""

from __future__ import annotations

import gc
import json
import uuid

import pytest
from confluent_kafka import Producer

from topiclake.lake.jobs.main import backfill_main, ingest_main

from tests.support.lake import read_table

pytestmark = pytest.mark.slow

ACCOUNTS = 40
BAD_ID = 7


def change(op: str, account: int, balance) -> tuple[bytes, bytes]:
    """A schema-less Debezium event (JsonConverter with schemas.enable=false) of table bank.accounts."""
    image = {"id": account, "balance": balance}
    before, after = (image, None) if op == "d" else (None, image)
    payload = {"before": before, "after": after, "op": op, "ts_ms": 1_714_564_800_000,
               "source": {"db": "bank", "table": "accounts", "ts_ms": 1_714_564_800_000}}
    return json.dumps({"id": account}).encode(), json.dumps(payload).encode()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    del producer
    gc.collect()  # no client left polling the broker after the session's broker stops


def test_one_event_of_another_type_goes_to_quarantine_alone(spark, registry_broker, capsys):
    proc, _ = registry_broker
    topic = f"dbz-drift-{uuid.uuid4().hex[:6]}"
    produce(proc.bootstrap, topic, [change("c", i, 100 * i) for i in range(ACCOUNTS)])
    argv = ["--topic", topic, "--format", "debezium", "--data", str(proc.data), "--bootstrap", "none"]
    assert ingest_main(argv) == 0
    uri = proc.data / "tables" / topic
    _table, data = read_table(uri)
    assert str(data.schema.field("balance").type) == "int64"
    assert f"upsert: {ACCOUNTS} rows changed ({ACCOUNTS} inserted, 0 updated, 0 deleted)" in capsys.readouterr().out

    # Every account changes, the last one is deleted; one event's balance is text. The run's sample holds it.
    updates = [change("u", i, "lots" if i == BAD_ID else 100 * i + 1) for i in range(ACCOUNTS - 1)]
    produce(proc.bootstrap, topic, updates + [change("d", ACCOUNTS - 1, None)])
    assert ingest_main(argv) == 0
    summary = capsys.readouterr().out
    expected = {i: 100 * i + (0 if i == BAD_ID else 1) for i in range(ACCOUNTS - 1)}
    assert balances(uri) == expected
    _q, quarantine = read_table(proc.data / "tables" / f"{topic}_quarantine")
    assert quarantine.column("offset").to_pylist() == [ACCOUNTS + BAD_ID]
    assert "after.balance is not int64" in quarantine.column("error")[0].as_py()
    assert "quality passed" not in summary
    assert f"1 record quarantined to {topic}_quarantine" in summary
    assert f"{ACCOUNTS} records read" in summary  # the events, not the rows they collapse to
    assert f"upsert: {ACCOUNTS - 1} rows changed (0 inserted, {ACCOUNTS - 2} updated, 1 deleted)" in summary

    assert backfill_main(["--table", topic, "--topic", topic, "--partition", "0", "--from", "0",
                          "--to", str(2 * ACCOUNTS), "--data", str(proc.data)]) == 0
    assert f"{2 * ACCOUNTS} records read" in capsys.readouterr().out  # not the rows they collapse to
    assert balances(uri) == expected
    assert read_table(proc.data / "tables" / f"{topic}_quarantine")[1].num_rows == 1


def balances(uri) -> dict[int, int]:
    _table, data = read_table(uri)
    rows = data.select(["id", "balance"]).to_pylist()
    assert len(rows) == len({r["id"] for r in rows}), "one row per account"
    return {r["id"]: r["balance"] for r in rows}
