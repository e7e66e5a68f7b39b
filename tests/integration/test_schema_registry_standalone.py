"""`topiclake registry start`: the registry as its own process, keeping `_schemas` on a broker over
the Kafka protocol; a restart (or a second, read-only instance) replays the same registry, and a
broker serving the registry itself reads what the standalone one wrote."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess
from tests.support.registry_http import REGISTRY_ARGS, RegistryHTTP

pytestmark = pytest.mark.slow


class RegistryProcess:
    def __init__(self, bootstrap: str, log_path, *extra: str):
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "registry", "start", "--bootstrap",
                                      bootstrap, "--listen", "127.0.0.1:0", *extra],
                                     stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO)
        self.http = RegistryHTTP(self._wait_for_url())

    def _wait_for_url(self, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = re.search(r"schema registry at (http://\S+)", self.log_path.read_text())
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                raise RuntimeError(f"registry exited with {self.proc.returncode}: {self.log_path.read_text()}")
            time.sleep(0.1)
        raise RuntimeError(f"registry did not start: {self.log_path.read_text()}")

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(30)
        finally:
            self._log.close()


def test_standalone_registry_over_the_kafka_protocol(tmp_path):
    broker = BrokerProcess(tmp_path / "data").start(timeout=60)
    try:
        first = RegistryProcess(broker.bootstrap, tmp_path / "registry-1.log")
        ids = {f"sa-{i}": first.http.ok("POST", f"/subjects/sa-{i}/versions",
                                        {"schema": json.dumps({"type": "enum", "name": f"E{i}", "symbols": ["A"]})})["id"]
               for i in range(5)}
        first.http.ok("PUT", "/config/sa-0", {"compatibility": "FULL"})
        reader = RegistryProcess(broker.bootstrap, tmp_path / "registry-2.log", "--read-only")
        assert reader.http.ok("GET", "/subjects/sa-3/versions/1")["id"] == ids["sa-3"]
        assert reader.http.error("POST", "/subjects/sa-9/versions", {"schema": '"int"'})[:2] == (422, 42205)
        assert first.stop() == 0 and reader.stop() == 0

        again = RegistryProcess(broker.bootstrap, tmp_path / "registry-3.log")
        assert {s: again.http.ok("GET", f"/subjects/{s}/versions/latest")["id"] for s in ids} == ids
        assert again.http.ok("GET", "/config/sa-0") == {"compatibilityLevel": "FULL"}
        assert again.http.ok("POST", "/subjects/sa-new/versions", {"schema": '"int"'})["id"] > max(ids.values())
        assert again.stop() == 0
    finally:
        broker.stop()
    # the broker serving the registry itself replays what the standalone registry wrote
    broker = BrokerProcess(tmp_path / "data", args=REGISTRY_ARGS).start(timeout=60)
    try:
        embedded = RegistryHTTP(broker.registry_url())
        assert {s: embedded.ok("GET", f"/subjects/{s}/versions/1")["id"] for s in ids} == ids
    finally:
        broker.stop()
