"""`topiclake dump-log`: text like kafka-dump-log, --json per batch, index files, corrupt files."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from tests.conftest import KAFKA_38_SEGMENTS
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
