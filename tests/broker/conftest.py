"""The in-process broker of the broker tests (tests/support/in_process_broker.py)."""

from __future__ import annotations

import pytest

from tests.support.in_process_broker import InProcessBroker


@pytest.fixture
def broker(tmp_path):
    b = InProcessBroker(tmp_path / "data").start()
    yield b
    b.stop()
