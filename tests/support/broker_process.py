"""A real `topiclake broker start` process on a free loopback port, for integration tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.support.paths import REPO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds the socket listening on `port` (Linux /proc): a free port picked
    for a broker may be taken by another process before the broker binds it, and a connection
    to that port then proves nothing about this broker."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # exited
        return False
    owned = set()
    for fd in fds:
        try:
            owned.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed while listed
            continue
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            listening = fields[3] == "0A"
            if listening and int(fields[1].rsplit(":", 1)[1], 16) == port and f"socket:[{fields[9]}]" in owned:
                return True
    return False


class BrokerProcess:
    def __init__(self, data: Path, port: int | None = None, *, log_path: Path | None = None,
                 config: Path | None = None, args: tuple[str, ...] = (), root: str | None = None,
                 launcher: tuple[str, ...] = ("-m", "topiclake.cli")):
        """`root`: a URL root (s3://...) given as --data instead of `data` (then the cache's parent).
        `launcher`: what the Python interpreter runs, given `broker start ...` after it."""
        self.launcher = tuple(launcher)
        self.data = Path(data)
        self.root = root if root is not None else str(self.data)
        self.args = tuple(args)  # more `broker start` flags, e.g. ("--registry-listen", "127.0.0.1:0")
        self.config = Path(config) if config is not None else REPO / "conf" / "topiclake.toml"
        self.port = port or free_port()
        self._port_chosen = port is None  # a new one is picked if another process took it first
        self.log_path = log_path or self.data.parent / f"broker-{self.port}.log"
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0, *, tries: int = 3) -> "BrokerProcess":
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("TOPICLAKE_ROOT", None)
        self._log = open(self.log_path, "ab")
        logged = self.log_path.stat().st_size
        self.proc = subprocess.Popen(
            [sys.executable, *self.launcher, "broker", "start", "--port", str(self.port),
             "--data", self.root, "--config", str(self.config), *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                told = self.log_path.read_bytes()[logged:].decode(errors="replace")
                if self._port_chosen and tries > 1 and f"cannot listen on 127.0.0.1:{self.port}" in told:
                    self._log.close()
                    self.port = free_port()  # taken between its pick and the broker's bind
                    return self.start(deadline - time.monotonic(), tries=tries - 1)
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log()}")
            if listens_on(self.proc.pid, self.port):
                return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"broker did not listen on {self.port} within {timeout}s: {self.log()}")

    def registry_url(self, timeout: float = 30.0) -> str:
        """The schema registry's URL from this broker's registration (the broker writes it once serving)."""
        import json

        path = self.data / "cluster" / "brokers" / "0.json"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                info = json.loads(path.read_text())
                if info.get("pid") == self.proc.pid and info.get("schema_registry"):
                    return info["schema_registry"]
            except (FileNotFoundError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}: {self.log()}")
            time.sleep(0.05)
        raise RuntimeError(f"no schema registry registered within {timeout}s: {self.log()}")

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait: the clean shutdown path."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if hasattr(self, "_log"):
            self._log.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""
