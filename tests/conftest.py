"""Fixtures shared by every test package."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

if TYPE_CHECKING:
    from topiclake.store.root import S3Root

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


class S3Fixture(NamedTuple):
    root: "S3Root"
    env: dict[str, str]  # the AWS variables a subprocess needs to reach the same bucket


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One versitygw for the session (tests/support/s3.py); tests that kill it start their own."""
    from tests.support.s3 import VersityGW

    server = VersityGW(tmp_path_factory.mktemp("s3")).start()
    yield server
    server.stop()


@pytest.fixture
def s3_root(s3_server) -> S3Fixture:
    """A fresh bucket on the session's versitygw, as the root s3://<bucket>/data, and its environment."""
    from topiclake.store.root import parse_root

    env = s3_server.env()
    return S3Fixture(parse_root(f"s3://{s3_server.create_bucket()}/data", env=env), env)
