"""`topiclake dump-log`: text like kafka-dump-log, --json per batch, index files, corrupt files."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.support.paths import KAFKA_38_SEGMENTS
from topiclake.cli import app
from topiclake.segments.batch import Record, build_batch

FOO = KAFKA_38_SEGMENTS / "codecrafters-kafka-tester-e856b9a" / "foo-0"
METADATA_510 = KAFKA_38_SEGMENTS / "codecrafters-kafka-tester-510714e" / "__cluster_metadata-0"
runner = CliRunner()


def _invoke(*args: str):
    return runner.invoke(app, ["dump-log", *args])


def test_text_output_of_a_kafka_segment():
    result = _invoke("--print-data", str(FOO / "00000000000000000000.log"))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 2
    assert "baseOffset: 0 lastOffset: 1 count: 2" in batches[0] and "producerId: 0" in batches[0]
    assert "isValid: true" in batches[0] and "position: 80" in batches[1]
    payloads = [line.split("payload: ")[1] for line in lines if line.startswith("| offset:")]
    assert payloads == ["m1", "m2", "m3"]


def test_json_output_has_one_object_per_batch_with_base64_bytes():
    result = _invoke("--json", str(FOO / "00000000000000000000.log"))
    assert result.exit_code == 0, result.output
    objects = [json.loads(line) for line in result.output.splitlines()]
    assert [(o["baseOffset"], o["lastOffset"], o["count"]) for o in objects] == [(0, 1, 2), (2, 2, 1)]
    assert all(o["isValid"] and o["compression"] == "none" and o["producerId"] == 0 for o in objects)
    values = [base64.b64decode(r["value"]) for o in objects for r in o["records"]]
    assert values == [b"m1", b"m2", b"m3"]
    assert objects[0]["records"][0]["key"] is None and objects[0]["records"][0]["headers"] == []


def test_index_files_list_their_entries():
    result = _invoke(str(METADATA_510 / "00000000000000000000.index"),
                     str(METADATA_510 / "00000000000000000000.timeindex"))
    assert result.exit_code == 0, result.output
    assert "offset: 57 position: 4154" in result.output and "offset: 114 position: 8258" in result.output
    assert "timestamp: 1726046001742 offset: 128" in result.output


def test_corrupt_file_prints_valid_batches_then_the_error_and_exits_1(tmp_path):
    good = build_batch([Record(0, 10, b"k", b"v")]) + build_batch([Record(1, 11, b"k", b"w")])
    bad = bytearray(build_batch([Record(2, 12, b"k", b"x" * 20)]))
    bad[-3] ^= 0x55
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(good + bytes(bad) + b"\x00" * 7)
    result = subprocess.run([sys.executable, "-m", "topiclake.cli", "dump-log", "--json", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    assert [o["baseOffset"] for o in objects] == [0, 1, 2]
    assert [o["isValid"] for o in objects] == [True, True, False]
    assert f"{path}" in result.stderr and f"position {len(good)}" in result.stderr and "CRC" in result.stderr


def test_truncated_file_reports_the_cut(tmp_path):
    data = build_batch([Record(0, 10, b"k", b"v")]) + build_batch([Record(1, 11, b"k", b"w")])[:-4]
    path = tmp_path / "00000000000000000005.log"
    path.write_bytes(data)
    result = _invoke(str(path))
    assert result.exit_code == 1
    assert "Log starting offset: 5" in result.output
    assert "truncated batch" in result.output and "baseOffset: 0" in result.output


def test_other_files_are_refused(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    shutil.copy(FOO / "leader-epoch-checkpoint", path)
    result = _invoke(str(path))
    assert result.exit_code != 0
    assert "not a .log, .index, .timeindex, .txnindex or .snapshot file" in result.output


def test_producer_snapshots_and_txn_indexes_list_their_entries(tmp_path):
    from topiclake.segments.txn_index import TxnIndexEntry, write_txn_index

    txnindex = tmp_path / "00000000000000000010.txnindex"
    write_txn_index(txnindex, [TxnIndexEntry(7, 10, 14, 15)])
    result = _invoke(str(FOO / "00000000000000000003.snapshot"), str(txnindex))
    assert result.exit_code == 0, result.output
    assert "producerId: 0 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: -1 lastSequence: 2" in result.output
    assert "producerId: 7 firstOffset: 10 lastOffset: 14 lastStableOffset: 15" in result.output


def _dump_subprocess(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topiclake.cli", "dump-log", *args],
                          capture_output=True, text=True, timeout=60)


def _active_segment_with_index_entries(tmp_path):
    """A log whose active segment has index entries, left open as a live broker leaves it: the
    .index and .timeindex are preallocated to segment.index.bytes of zeros after the entries."""
    from topiclake.segments.config import LogConfig
    from topiclake.segments.log import Log

    config = LogConfig.from_properties({"index.interval.bytes": "1"})
    log = Log.open(tmp_path / "t-0", config, topic="t", partition=0, now_ms=1_000)
    for i in range(6):
        log.append(build_batch([Record(0, 1_000 + i, b"k", b"v" * 30)]), now_ms=1_000 + i)
    log.flush()
    segment = log.active_segment
    offsets = [segment.offset_index.entry(n) for n in range(segment.offset_index.entries)]
    times = [segment.time_index.entry(n) for n in range(segment.time_index.entries)]
    log.close_handlers()
    return tmp_path / "t-0", offsets, times


def test_preallocated_index_stops_at_the_first_empty_slot(tmp_path):
    directory, offsets, times = _active_segment_with_index_entries(tmp_path)
    index, timeindex = directory / "00000000000000000000.index", directory / "00000000000000000000.timeindex"
    assert index.stat().st_size == 10 * 1024 * 1024 and len(offsets) == 5 and len(times) == 5
    result = _dump_subprocess(str(index), str(timeindex))
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.splitlines() == (
        [f"Dumping {index}"] + [f"offset: {e.offset} position: {e.position}" for e in offsets]
        + [f"Dumping {timeindex}"] + [f"timestamp: {e.timestamp} offset: {e.offset}" for e in times])


def test_all_zero_index_shows_only_its_first_slot_as_kafka_does(tmp_path):
    path = tmp_path / "00000000000000000042.index"
    path.write_bytes(bytes(8 * 1000))
    assert _invoke(str(path)).output.splitlines() == [f"Dumping {path}", "offset: 42 position: 0"]
    empty = tmp_path / "00000000000000000042.timeindex"
    empty.write_bytes(b"")
    assert _invoke(str(empty)).output.splitlines() == [f"Dumping {empty}"]
    path.write_bytes(b"")
    assert _invoke(str(path)).output.splitlines() == [f"Dumping {path}", f"{path} is empty."]


@pytest.mark.parametrize("suffix, entries, valid, error", [
    (".index", [(">ii", 5, 100), (">ii", 9, 300), (">ii", 7, 400), (">ii", 12, 500)],
     ["offset: 15 position: 100", "offset: 19 position: 300"],
     "position 16: entry 2: offset 17 does not increase (the previous entry has 19)"),
    (".index", [(">ii", 5, 100), (">ii", 9, 100)], ["offset: 15 position: 100"],
     "position 8: entry 1: position 100 does not increase (the previous entry has 100)"),
    (".index", [(">ii", -3, 100)], [], "position 0: entry 0: offset 7 is below the base offset 10"),
    (".timeindex", [(">qi", 2000, 3), (">qi", 2000, 6)], ["timestamp: 2000 offset: 13"],
     "position 12: entry 1: timestamp 2000 does not increase (the previous entry has 2000)"),
    (".timeindex", [(">qi", 2000, 3), (">qi", 3000, 2)], ["timestamp: 2000 offset: 13"],
     "position 12: entry 1: offset 12 goes back (the previous entry has 13)"),
])
def test_entries_that_do_not_increase_are_corruption(tmp_path, suffix, entries, valid, error):
    import struct

    path = tmp_path / f"00000000000000000010{suffix}"
    path.write_bytes(b"".join(struct.pack(fmt, a, b) for fmt, a, b in entries) + bytes(80))
    result = _dump_subprocess(str(path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [f"Dumping {path}", *valid]
    assert result.stderr == f"error: {path}, {error}\n"


def test_torn_last_entry_is_reported_after_the_valid_ones(tmp_path):
    import struct

    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(struct.pack(">ii", 3, 64) + b"\x00\x00\x00")
    result = _dump_subprocess(str(path))
    assert result.returncode == 1 and result.stdout.splitlines()[1:] == ["offset: 3 position: 64"]
    assert result.stderr == f"error: {path}, position 8: 3 bytes at the end are not a whole 8-byte entry\n"


def test_a_name_that_is_not_20_digits_is_one_line_and_the_other_files_still_dump(tmp_path):
    bad = tmp_path / "copy.index"
    bad.write_bytes(bytes(16))
    result = _dump_subprocess(str(bad), str(METADATA_510 / "00000000000000000000.index"))
    assert result.returncode == 1
    assert result.stderr == (f"error: {bad}: not a segment file name (20 digits, then .index): the base offset "
                             "its entries are relative to is unknown\n")
    assert "offset: 57 position: 4154" in result.stdout
