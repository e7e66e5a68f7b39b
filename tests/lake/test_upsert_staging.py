"""A merge removes its own staging files, and those of runs killed long ago; never those of a
run still writing (judged by its newest file, not by when its directory was made)."""

from __future__ import annotations

import os
import time

from topiclake.lake.keyed.staging import STAGING_DIR, remove_staging


def staged_run(table, run_id: str, *, age_s: float, newest_age_s: float) -> None:
    bucket = table / STAGING_DIR / run_id / "bucket-3"
    bucket.mkdir(parents=True)
    for name, age in (("old.parquet", age_s), ("new.parquet", newest_age_s)):
        (bucket / name).write_bytes(b"x")
        os.utime(bucket / name, (time.time() - age, time.time() - age))
    for directory in (bucket, bucket.parent):
        os.utime(directory, (time.time() - age_s, time.time() - age_s))


def test_staging_of_this_run_and_of_long_dead_runs_go_a_long_running_one_stays(tmp_path):
    table = tmp_path / "t"
    day = 24 * 3600
    staged_run(table, "mine", age_s=10, newest_age_s=10)
    staged_run(table, "killed", age_s=3 * day, newest_age_s=2 * day)
    staged_run(table, "long-running", age_s=3 * day, newest_age_s=60)
    remove_staging(f"file://{table}", "mine")
    assert sorted(p.name for p in (table / STAGING_DIR).iterdir()) == ["long-running"]
