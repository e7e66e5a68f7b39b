"""delta-rs on a bucket, configured by S3Root.delta_storage_options(): a table written and read
at root.uri("tables", ...), and two processes racing to commit to one table (delta-rs commits by
PUT `_delta_log/N.json` with If-None-Match: a loser retries at the next version, no commit lost)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from topiclake.store.objects import ObjectStore

COMMITS_PER_WRITER = 20
# One writer process: its root from the environment (as a job would get it), 20 appends of 3 rows.
# Both start at the same wall-clock time (argv[3]), after their imports.
WRITER = textwrap.dedent("""
    import os, sys, time
    import pyarrow as pa
    from deltalake import CommitProperties, write_deltalake
    from topiclake.store.root import parse_root

    root = parse_root(sys.argv[1], env=os.environ)
    writer = sys.argv[2]
    time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
    for seq in range({commits}):
        rows = pa.table({{"writer": [writer] * 3, "seq": [seq] * 3, "i": [0, 1, 2]}})
        write_deltalake(root.uri("tables", "race"), rows, mode="append", storage_options=root.delta_storage_options(),
                        commit_properties=CommitProperties(custom_metadata={{"writer": writer}}))
""").format(commits=COMMITS_PER_WRITER)
SCHEMA = pa.schema([("writer", pa.string()), ("seq", pa.int64()), ("i", pa.int64())])


def test_write_and_read_a_table_on_the_bucket(s3_root):
    root = s3_root.root
    uri = root.uri("tables", "t")
    options = root.delta_storage_options()
    write_deltalake(uri, pa.table({"k": ["a", "b"], "v": [1, 2]}), storage_options=options)
    write_deltalake(uri, pa.table({"k": ["c"], "v": [3]}), mode="append", storage_options=options)
    table = DeltaTable(uri, storage_options=options)
    assert table.version() == 1
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["k"]) == [
        {"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "c", "v": 3}]
    log = sorted(info.key for info in ObjectStore(root).list("tables/t/_delta_log"))
    assert log == ["tables/t/_delta_log/00000000000000000000.json", "tables/t/_delta_log/00000000000000000001.json"]


def test_two_processes_racing_to_commit_lose_nothing(s3_root):
    root = s3_root.root
    uri = root.uri("tables", "race")
    write_deltalake(uri, SCHEMA.empty_table(), storage_options=root.delta_storage_options())  # version 0
    start_at = str(time.time() + 5)  # both processes imported by then, even on a busy machine
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(root), name, start_at], env=s3_root.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in ("w1", "w2")]
    for writer in writers:
        _out, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err

    table = DeltaTable(uri, storage_options=root.delta_storage_options())
    assert table.version() == 2 * COMMITS_PER_WRITER
    rows = table.to_pyarrow_table().to_pylist()
    assert sorted((r["writer"], r["seq"], r["i"]) for r in rows) == sorted(
        (w, seq, i) for w in ("w1", "w2") for seq in range(COMMITS_PER_WRITER) for i in range(3))

    names = [info.key.rsplit("/", 1)[1] for info in ObjectStore(root).list("tables/race/_delta_log")]
    versions = sorted(int(m.group(1)) for m in map(re.compile(r"(\d{20})\.json").fullmatch, names) if m)
    assert versions == list(range(2 * COMMITS_PER_WRITER + 1)), "versions 0..40, no gap"
    # the commits interleave: the writers really raced (each lost some PUTs and retried)
    by_version = [h.get("writer") for h in sorted(table.history(), key=lambda h: h["version"])][1:]
    assert sorted(by_version) == ["w1"] * COMMITS_PER_WRITER + ["w2"] * COMMITS_PER_WRITER
    switches = sum(1 for a, b in zip(by_version, by_version[1:]) if a != b)
    assert switches >= 2, by_version
