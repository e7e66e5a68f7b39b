"""kill -9 of the broker while clients register schemas: every registration the registry
acknowledged is there after the restart with the same id, and no id is handed out twice."""

from __future__ import annotations

import json
import threading
import time

import pytest

from topiclake.registry.log_replay import load_state

from tests.support.broker_process import BrokerProcess
from tests.support.registry_http import REGISTRY_ARGS, RegistryHTTP

pytestmark = pytest.mark.slow


def _schema(i: int) -> str:
    return json.dumps({"type": "record", "name": f"R{i}", "fields": [{"name": "f", "type": "long"}]})


def _register_until_failure(http: RegistryHTTP, acked: dict[str, int], stop: threading.Event, worker: int) -> None:
    i = 0
    while not stop.is_set():
        subject = f"kill-{worker}-{i}"
        try:
            status, body = http.call("POST", f"/subjects/{subject}/versions", {"schema": _schema(worker * 10_000 + i)})
        except OSError:
            return  # the broker is gone
        if status != 200:
            return
        acked[subject] = body["id"]
        i += 1


def test_kill_during_registrations_loses_no_acknowledged_schema(tmp_path):
    data = tmp_path / "data"
    proc = BrokerProcess(data, args=REGISTRY_ARGS).start(timeout=60)
    http = RegistryHTTP(proc.registry_url())
    acked: dict[str, int] = {}
    stop = threading.Event()
    workers = [threading.Thread(target=_register_until_failure, args=(http, acked, stop, w)) for w in range(3)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 60
    while len(acked) < 60 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.kill()  # SIGKILL while the workers are mid-registration
    stop.set()
    for w in workers:
        w.join(30)
    assert len(acked) >= 60, proc.log()

    proc = BrokerProcess(data, args=REGISTRY_ARGS).start(timeout=60)
    try:
        http = RegistryHTTP(proc.registry_url())
        for subject, schema_id in acked.items():
            assert http.ok("GET", f"/subjects/{subject}/versions/1")["id"] == schema_id, subject
        assert len(set(acked.values())) == len(acked)  # distinct schemas, distinct ids
        after = http.ok("POST", "/subjects/after-restart/versions", {"schema": _schema(99_999)})["id"]
        assert after > max(acked.values())
        everything = {s: http.ok("GET", f"/subjects/{s}/versions/1")["id"] for s in http.ok("GET", "/subjects")}
        assert len(set(everything.values())) == len(everything)  # unacknowledged ones too: no id twice
    finally:
        proc.stop()
    state = load_state(data)  # the segment files say the same
    assert {s: state.latest(s).id for s in acked} == acked
