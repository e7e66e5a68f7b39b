"""A topic's table read back as record batches (topiclake.archive), on tables deltalake writes:
the same offsets (gaps included), keys, values, headers, timestamps and timestamp types; valid
CRCs; the byte budget; the files' statistics; what the table holds; upsert tables archive nothing."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from tests.support.archive_rows import EPOCH, TOPIC, commit, rows
from topiclake.archive.reader import TopicTables
from topiclake.segments.batch import Record, TimestampType, iter_batches

def expected_records(table: pa.Table) -> list[Record]:
    return [Record(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"],
                   tuple((h["key"], h["value"]) for h in r["headers"])) for r in table.to_pylist()]


def decoded(data: bytes) -> tuple[list[Record], list]:
    batches = list(iter_batches(data))
    for batch in batches:
        batch.ensure_valid()  # CRC-32C
    return [r for b in batches for r in b.records()], [b.header for b in batches]


@pytest.fixture
def table_uri(tmp_path) -> str:
    return str(tmp_path / "tables" / TOPIC)


def test_rows_come_back_as_batches_with_their_offsets_gaps_keys_values_headers_and_timestamps(table_uri):
    first = rows(0, list(range(0, 60, 3)))  # gaps: what compaction, markers or aborted records leave
    second = rows(0, list(range(60, 90)))
    other = rows(1, list(range(0, 40)))
    commit(table_uri, pa.concat_tables([first, other]), {0: 60, 1: 40})
    commit(table_uri, second, {0: 90})
    tables = TopicTables(lambda topic: (table_uri, None))

    assert (tables.archived_end(TOPIC, 0), tables.archived_end(TOPIC, 1), tables.archived_end(TOPIC, 2)) == (90, 40, None)
    assert (tables.first_offset(TOPIC, 0), tables.first_offset(TOPIC, 1)) == (0, 0)
    records, headers = decoded(tables.read(TOPIC, 0, 4, 1 << 20, True))
    assert records == expected_records(pa.concat_tables([first, second]))[2:]  # from offset 6: the first at or above 4
    assert all(h.producer_id == -1 and not h.is_transactional and h.timestamp_type == TimestampType.CREATE_TIME
               for h in headers)
    assert tables.read(TOPIC, 0, 90, 1 << 20, True) is None  # the table ends there: the log's


def test_log_append_time_batches_keep_each_records_time(table_uri):
    appended = rows(0, list(range(20)), log_append=True)  # the timestamp changes every 4 offsets
    commit(table_uri, appended, {0: 20})
    records, headers = decoded(TopicTables(lambda topic: (table_uri, None)).read(TOPIC, 0, 0, 1 << 20, True))
    assert [h.timestamp_type for h in headers] == [TimestampType.LOG_APPEND_TIME] * 5
    # a LogAppendTime batch's records all take its max timestamp: one batch per distinct time
    assert [(h.base_offset, h.max_timestamp) for h in headers] == [
        (o, int((EPOCH + dt.timedelta(milliseconds=o // 4)).timestamp() * 1000)) for o in range(0, 20, 4)]
    assert [r.offset for r in records] == list(range(20))


def test_the_byte_budget_bounds_the_answer_but_one_batch_always_comes(table_uri):
    commit(table_uri, rows(0, list(range(200))), {0: 200})
    tables = TopicTables(lambda topic: (table_uri, None))
    bounded = tables.read(TOPIC, 0, 10, 1000, False)
    records, _ = decoded(bounded)
    assert 0 < len(bounded) <= 1000 and records[0].offset == 10
    whole = tables.read(TOPIC, 0, 10, 1 << 20, True)
    assert whole.startswith(bounded[:61 - 4]) or decoded(whole)[0][:len(records)] == records
    assert tables.read(TOPIC, 0, 10, 5, False) == b""  # nothing fits: nothing (another partition may)
    assert len(decoded(tables.read(TOPIC, 0, 10, 5, True))[0]) >= 1  # the first partition: one batch anyway


def test_many_files_are_pruned_by_their_statistics_and_read_in_offset_order(table_uri):
    for start in range(0, 500, 50):
        commit(table_uri, pa.concat_tables([rows(0, list(range(start, start + 50))),
                                            rows(1, list(range(start, start + 50)))]), {0: start + 50, 1: start + 50})
    tables = TopicTables(lambda topic: (table_uri, None))
    snapshot = tables.snapshot(TOPIC)
    assert snapshot.files.num_rows == 10
    window = snapshot.read(1, 230, 500, 1)  # a small budget: the file holding 230 and no further
    assert window.column("offset").to_pylist() == list(range(230, 250))
    records, _ = decoded(tables.read(TOPIC, 1, 230, 1 << 20, True))
    assert [r.offset for r in records] == list(range(230, 500))


def test_a_newer_version_is_seen_after_the_ttl_and_an_upsert_table_archives_nothing(table_uri, tmp_path):
    now = [0.0]
    tables = TopicTables(lambda topic: (table_uri, None), ttl=2.0, clock=lambda: now[0])
    assert tables.archived_end(TOPIC, 0) is None  # no table yet
    commit(table_uri, rows(0, [0, 1]), {0: 2})
    assert tables.archived_end(TOPIC, 0) is None  # within the ttl: the answer stands
    now[0] = 2.0
    assert tables.archived_end(TOPIC, 0) == 2

    upsert_uri = str(tmp_path / "tables" / "keyed")
    commit(upsert_uri, rows(0, [0, 1]), {0: 2})
    DeltaTable(upsert_uri).alter.set_table_properties({"topiclake.kind": "upsert"}, raise_if_not_exists=False)
    upserts = TopicTables(lambda topic: (upsert_uri, None))
    assert upserts.archived_end(TOPIC, 0) is None and upserts.read(TOPIC, 0, 0, 1000, True) is None


def test_the_first_offset_of_a_partition_is_found_reading_only_the_first_files(table_uri):
    for start in range(0, 400, 50):  # partition 0 from 0; partition 1 only from 300, after retention of the table
        commit(table_uri, pa.concat_tables([rows(0, list(range(start, start + 50)))]
                                           + ([rows(1, list(range(start, start + 50)))] if start >= 300 else [])),
               {0: start + 50})
    snapshot = TopicTables(lambda topic: (table_uri, None)).snapshot(TOPIC)
    assert (snapshot.first_offset(0), snapshot.first_offset(1), snapshot.first_offset(2)) == (0, 300, None)
