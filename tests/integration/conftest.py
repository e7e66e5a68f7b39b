"""Fixtures shared by the integration tests."""

from __future__ import annotations

import pytest

from .broker_process import BrokerProcess
from .registry_http import RegistryHTTP

REGISTRY_ARGS = ("--registry-listen", "127.0.0.1:0")


@pytest.fixture(scope="session")
def registry_broker(tmp_path_factory):
    """One real broker process serving the schema registry, for the registry API and serializer tests
    (each test uses its own subjects and topics)."""
    proc = BrokerProcess(tmp_path_factory.mktemp("registry") / "data", args=REGISTRY_ARGS).start(timeout=60)
    try:
        yield proc, RegistryHTTP(proc.registry_url())
    finally:
        proc.stop()
