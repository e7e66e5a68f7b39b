"""versitygw, the real S3 server of the tests (docs/STACK.md): started on a free loopback port
over a directory (its posix backend: a bucket is a folder), ready when it answers HTTP, its log in
a file. `kill9()` and `restart()` (same port, same directory) are for fault tests: what was
written before a kill -9 must still be there after.

bin/_env.sh builds the binary into .venv/bin; no mock stands in for it.
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ACCESS_KEY = "topiclake-test"
SECRET_KEY = "topiclake-test-secret-key"
REGION = "us-east-1"
READY_TIMEOUT_S = 20.0


def versitygw_binary() -> Path:
    """The venv's versitygw (bin/_env.sh builds it), else one on PATH."""
    beside = Path(sys.executable).with_name("versitygw")
    found = beside if beside.is_file() else shutil.which("versitygw")
    if not found:
        raise RuntimeError("versitygw not found: bin/_env.sh builds it into .venv/bin (it needs Go >= 1.25)")
    return Path(found)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class VersityGW:
    def __init__(self, directory: Path, port: int | None = None):
        self.directory = Path(directory)
        self.data_dir = self.directory / "buckets"
        self.log_path = self.directory / "versitygw.log"
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point boto3, delta-rs, obstore and parse_root here."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true"}

    def start(self) -> "VersityGW":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [str(versitygw_binary()), "--access", ACCESS_KEY, "--secret", SECRET_KEY, "--region", REGION,
                 "--port", f"127.0.0.1:{self.port}", "posix", str(self.data_dir)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"versitygw exited ({self.process.returncode}) on port {self.port}: {self.log_tail()}")
            try:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                connection.request("GET", "/")
                connection.getresponse().read()  # any answer (403: unsigned) means it serves
                connection.close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"versitygw did not answer on port {self.port} within {READY_TIMEOUT_S} s: {self.log_tail()}")

    def log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def create_bucket(self, name: str | None = None) -> str:
        """A new empty bucket (its posix backend's bucket is a directory)."""
        name = name or f"test-{uuid.uuid4().hex[:16]}"
        (self.data_dir / name).mkdir()
        return name

    def kill9(self) -> None:
        """SIGKILL: no shutdown, as a crash or a pulled plug."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def restart(self) -> None:
        """Start again on the same port over the same directory."""
        if self.process is not None and self.process.poll() is None:
            self.kill9()
        self.start()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill9()
