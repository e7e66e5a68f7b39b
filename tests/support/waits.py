"""Waiting for a condition that another process or thread makes true."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 15.0, interval: float = 0.02, what: str = "the condition", detail=None):
    """Poll `predicate` until it is truthy and return its value; `detail()` (if given) says what things
    looked like at the timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} did not happen within {timeout} s" + (f"\n{detail()}" if detail else ""))
