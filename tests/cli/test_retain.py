"""`topiclake retain --dry-run` says what a real run would do, and the real run then does it."""

from __future__ import annotations

import datetime as dt
import re

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from typer.testing import CliRunner

from tests.support.retention_logs import DAY, T0, bases, make_log
from topiclake.cli import app
from topiclake.segments.storage import StorageLayout

runner = CliRunner()


def retain(root, *args: str):
    return runner.invoke(app, ["retain", "--data", str(root), *args])


def test_dry_run_says_would_delete_with_the_log_start_offset_a_real_run_reaches(tmp_path):
    root = tmp_path / "data"
    directory = make_log(root, config={"retention.ms": str(DAY)})
    before = bases(directory)
    now = str(T0 + 3 * DAY + DAY // 2)

    dry = retain(root, "--now-ms", now, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "deleted" not in dry.output and "removed" not in dry.output
    assert dry.output.splitlines()[0].startswith("retention (dry run: nothing changed): would delete ")
    would = re.search(r"events-0: would delete (\d+) segments \((\d+) bytes; retention\.ms breach\), "
                      r"log start offset would be (\d+)", dry.output)
    assert would, dry.output
    assert bases(directory) == before

    real = retain(root, "--now-ms", now)
    assert real.exit_code == 0, real.output
    done = re.search(r"events-0: deleted (\d+) segments \((\d+) bytes; retention\.ms breach\), log start offset (\d+)",
                     real.output)
    assert done, real.output
    assert done.groups() == would.groups()
    count, start = int(done[1]), int(done[3])
    assert bases(directory) == before[count:] and start == before[count] > 0


def test_dry_run_of_table_maintenance_says_would_remove(tmp_path):
    root = tmp_path / "data"
    uri = str(StorageLayout(root).table_dir("events"))
    for day in range(3):
        write_deltalake(uri, pa.table({"offset": pa.array([day], pa.int64()),
                                       "record_date": pa.array([dt.date(2024, 5, 1 + day)])}),
                        mode="append", partition_by=["record_date"])
    now = str(int(dt.datetime(2024, 5, 4, tzinfo=dt.timezone.utc).timestamp() * 1000))
    version = DeltaTable(uri).version()

    dry = retain(root, "--now-ms", now, "--dry-run", "--table-retention-days", "2")
    assert dry.exit_code == 0, dry.output
    assert f"table {uri}: would remove 1 files (1 rows) of 1 dates before 2024-05-02" in dry.output
    assert DeltaTable(uri).version() == version

    real = retain(root, "--now-ms", now, "--table-retention-days", "2")
    assert f"table {uri}: removed 1 files (1 rows) of 1 dates before 2024-05-02" in real.output, real.output
    assert DeltaTable(uri).version() == version + 1
