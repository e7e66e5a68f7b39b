"""The processes the soak kills, and the threads that kill them.

`LakeProcess` runs lake_worker.py in its own process group (the Spark JVM and the Python
workers die with it) and follows its stdout. `BrokerKiller` and `LakeKiller` SIGKILL the broker
and the lake process at moments drawn from their own seeded RNG, and restart them at once: the
broker on the same port and storage root, as an operator's supervisor would.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Fault:
    target: str  # broker | lake; in a cluster also pause (SIGSTOP of a broker) | zookeeper
    at: float  # time.monotonic() of the kill
    phase: str = ""  # what the lake process was doing (in a cluster: which broker or node)
    restart_s: float = 0.0  # until the restarted process listens (broker) / was started (lake)
    restart_error: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()  # in a cluster: those the struck broker led


class LakeProcess:
    """lake_worker.py as a child process; `lines` are its stdout lines with their arrival times."""

    def __init__(self, work: Path, args: list[str]):
        self.work, self.args = work, args
        self.proc: subprocess.Popen | None = None
        self.lines: list[tuple[float, str]] = []
        self.ready = threading.Event()
        self.cycled = threading.Event()  # a whole cycle (ingest, compact, retain) ran since the start
        self.last_cycle_s = 0.0
        self._cycle_started = 0.0
        self.phase = ""
        self.starts = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        self.ready.clear()
        self.cycled.clear()
        self.phase = "starting"
        self.starts += 1
        stderr = open(self.work / "lake.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.soak.lake_worker", *self.args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=REPO,
            env=dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONUNBUFFERED="1"),
            start_new_session=True)  # its own group: the JVM and Python workers die with it
        stderr.close()
        threading.Thread(target=self._follow, args=(self.proc,), daemon=True).start()

    def _follow(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            line = line.strip()
            log.info("lake: %s", line)
            with self._lock:
                self.lines.append((time.monotonic(), line))
            if line == "READY":
                self.ready.set()
            elif line.startswith("PHASE "):
                self.phase = line.split()[1]
                if self.phase == "ingest":
                    self._cycle_started = time.monotonic()
            elif line.startswith(("DONE retain", "FAILED retain")):
                self.last_cycle_s = time.monotonic() - self._cycle_started
                self.cycled.set()

    def kill(self) -> str:
        """SIGKILL the whole process group; returns the phase it was in."""
        phase = self.phase if self.ready.is_set() else "starting"
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        return phase

    def finish(self, timeout_s: float) -> int | None:
        """Ask for the final ingest; the records it read, or None when it did not end well."""
        if self.proc.poll() is not None:
            self.start()
        if not self.ready.wait(timeout_s):
            return None
        self.proc.stdin.write("final\n")
        self.proc.stdin.flush()
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        finals = [line for _t, line in self.lines if line.startswith("FINAL ")]
        return int(finals[-1].split()[1]) if self.proc.returncode == 0 and finals else None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()

    def outcomes(self) -> dict[str, list[str]]:
        """DONE / FAILED lines by step name."""
        out: dict[str, list[str]] = {}
        with self._lock:
            for _t, line in self.lines:
                kind, _, rest = line.partition(" ")
                if kind in ("DONE", "FAILED"):
                    name, _, detail = rest.partition(" ")
                    out.setdefault(f"{kind.lower()} {name}", []).append(detail)
        return out


class Killer(threading.Thread):
    """Kills its target at random moments until `stop`; `faults` lists what it did."""

    def __init__(self, name: str, rng: random.Random, stop: threading.Event, gap_s: tuple[float, float]):
        super().__init__(name=name, daemon=True)
        self.rng, self.stop, self.gap_s = rng, stop, gap_s
        self.faults: list[Fault] = []
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stop.wait(self.rng.uniform(*self.gap_s)):
                self.record(self.strike())
        except Exception as exc:  # noqa: BLE001
            self.error = f"{self.name}: {type(exc).__name__}: {exc}"
            log.exception("%s died", self.name)

    def strike(self) -> Fault:
        raise NotImplementedError

    def record(self, fault: Fault) -> None:
        self.faults.append(fault)
        done = "paused a broker" if fault.target == "pause" else f"killed the {fault.target}"
        log.info("%s%s; back in %.1f s%s", done, f" (in {fault.phase})" if fault.phase else "",
                 fault.restart_s, f": RESTART FAILED {fault.restart_error}" if fault.restart_error else "")


class BrokerKiller(Killer):
    def __init__(self, broker: BrokerProcess, rng: random.Random, stop: threading.Event,
                 gap_s: tuple[float, float], restart_attempts: int = 3):
        super().__init__("broker-killer", rng, stop, gap_s)
        self.broker, self.restart_attempts = broker, restart_attempts

    def strike(self) -> Fault:
        at = time.monotonic()
        self.broker.kill()
        error = None
        for _attempt in range(self.restart_attempts):
            try:
                self.broker.start(timeout=60)
                error = None
                break
            except RuntimeError as exc:  # a broker that does not come back is a finding, not a stop
                error = " ".join(str(exc).split())[-500:]
                log.error("broker restart failed: %s", error)
        return Fault("broker", at, restart_s=time.monotonic() - at, restart_error=error)


class LakeKiller(Killer):
    """Once the lake process is up, kills it either `gap_s` later (with probability `cold_share`:
    Spark warming up, the cold first run) or, after it completed a cycle, at a random moment of
    the next one (warm runs: planning, executors, the commit, the mirror, compaction's swap)."""

    def __init__(self, lake: LakeProcess, rng: random.Random, stop: threading.Event, gap_s: tuple[float, float],
                 cold_share: float = 0.3):
        super().__init__("lake-killer", rng, stop, gap_s)
        self.lake, self.cold_share = lake, cold_share

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                if not self.lake.ready.wait(1.0):
                    continue
                if self.rng.random() < self.cold_share:
                    delay = self.rng.uniform(*self.gap_s)
                else:
                    while not self.lake.cycled.wait(1.0):
                        if self.stop.is_set():
                            return
                    delay = self.rng.uniform(0.0, 1.2 * self.lake.last_cycle_s)
                if self.stop.wait(delay):
                    break
                self.record(self.strike())
        except Exception as exc:  # noqa: BLE001
            self.error = f"{self.name}: {type(exc).__name__}: {exc}"
            log.exception("%s died", self.name)

    def strike(self) -> Fault:
        at = time.monotonic()
        phase = self.lake.kill()
        self.lake.start()
        return Fault("lake", at, phase=phase, restart_s=time.monotonic() - at)
