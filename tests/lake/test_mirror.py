"""Which broker the offsets are mirrored to, and that a broker that is down is only a warning.
(The mirror against a real broker: tests/integration/test_lake_broker.py.)"""

from __future__ import annotations

import json
import logging
import socket
import time

from topiclake.lake.runs.mirror import find_bootstrap, mirror_offsets
from topiclake.segments.storage import StorageLayout


def _register(layout: StorageLayout, broker_id: int, port: int, expires_ms: int) -> None:
    layout.brokers_dir.mkdir(parents=True, exist_ok=True)
    layout.broker_file(broker_id).write_text(json.dumps(
        {"broker_id": broker_id, "host": "127.0.0.1", "port": port, "lease_expires_ms": expires_ms}))


def test_bootstrap_from_flag_then_live_registrations(tmp_path, caplog):
    layout = StorageLayout(tmp_path)
    assert find_bootstrap(layout, None) == (None, "none registered")
    assert find_bootstrap(layout, "h:1") == ("h:1", "--bootstrap")
    now = int(time.time() * 1000)
    _register(layout, 0, 9092, now + 30_000)
    _register(layout, 1, 9093, now - 1)  # lease expired: that broker is gone
    bootstrap, source = find_bootstrap(layout, None)
    assert bootstrap == "127.0.0.1:9092" and str(layout.brokers_dir) in source
    assert find_bootstrap(layout, "none") == (None, "disabled")  # the flag turns mirroring off
    layout.broker_file(0).unlink()
    with caplog.at_level(logging.WARNING):
        assert find_bootstrap(layout, None)[0] is None
    assert "expired leases (127.0.0.1:9093)" in caplog.text


def test_unreachable_broker_is_a_warning(caplog):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        result = mirror_offsets(f"127.0.0.1:{port}", "g", {("orders", 0): 5}, timeout_s=2)
    assert time.monotonic() - started < 5
    assert not result.ok and "unreachable" in result.error and "NOT mirrored" in result.describe()
    assert "group g: offsets not mirrored" in caplog.text
    assert mirror_offsets(None, "g", {("orders", 0): 5}).describe().startswith("offsets not mirrored")
