"""Fixtures shared by every test package."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

# py4j logs "closing down" from __del__ at interpreter exit, after pytest closed the streams.
logging.getLogger("py4j").setLevel(logging.WARNING)

REPO = Path(__file__).resolve().parents[1]
# shared/ sits beside the project checkout (in CI too); tests read it in place, never copy it in.
CONFORMANCE = REPO.parent / "shared" / "conformance"
KAFKA_38_SEGMENTS = CONFORMANCE / "kafka-3.8-segments"


@pytest.fixture(scope="session")
def conformance_dir() -> Path:
    assert CONFORMANCE.is_dir(), f"conformance data not found at {CONFORMANCE}"
    return CONFORMANCE


@pytest.fixture(scope="session")
def batch_vectors(conformance_dir: Path) -> list[dict]:
    return json.loads((conformance_dir / "vectors.json").read_text())
