"""The fault-injection soak, short: 35 s of idempotent and transactional producers, a
consumer group, and ingest / compaction / retention in a Spark process, while kill -9 hits the
broker (restarted on the same port and root) and the lake process; then every check of
tests/integration/soak/check.py must pass. The seed is printed (SOAK_SEED=... replays it);
bench/soak.py runs the same for minutes."""

from __future__ import annotations

import os
import random

import pytest

from .soak.run import SoakConfig, run_soak

pytestmark = pytest.mark.slow


def test_soak_with_kills_loses_and_duplicates_nothing(spark, tmp_path):
    seed = int(os.environ.get("SOAK_SEED", random.randrange(10**6)))
    report = run_soak(SoakConfig(work=tmp_path, duration_s=35, seed=seed, rate=80, txn_rate=25,
                                 broker_kill_gap_s=(7, 13), lake_kill_gap_s=(2, 10), lake_cold_kill_share=1.0,
                                 retention_ms=8_000, segment_bytes=16 * 1024), spark=spark)
    print(report.format())
    assert report.kills("broker") >= 2 and report.kills("lake") >= 1, f"seed {seed}: too few faults injected"
    assert report.passed, f"seed {seed}:\n{report.format()}"
    assert report.verdict.lost == 0 and report.verdict.duplicated == 0 and report.verdict.table_rows > 0
