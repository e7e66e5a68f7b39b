"""Helpers of the cluster tests: recording callbacks, and member processes."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from tests.support.paths import REPO

SESSION_TIMEOUT_MS = 2000


class Recorder:
    """A callback that keeps what it was called with, and can wait for a value."""

    def __init__(self):
        self.calls: "queue.Queue" = queue.Queue()
        self.seen: list = []

    def __call__(self, *args):
        self.calls.put(args[0] if len(args) == 1 else args)

    def next(self, timeout: float = 15.0):
        value = self.calls.get(timeout=timeout)
        self.seen.append(value)
        return value

    def until(self, predicate, timeout: float = 15.0):
        deadline = time.monotonic() + timeout
        while True:
            value = self.next(max(0.01, deadline - time.monotonic()))
            if predicate(value):
                return value


class Member:
    """`python -m tests.cluster.member`: one ZooKeeperCoordination in a process of its own."""

    def __init__(self, connect: str, chroot: str, broker_id: int, campaign: bool):
        args = [sys.executable, "-m", "tests.cluster.member", connect, chroot, str(broker_id),
                str(SESSION_TIMEOUT_MS)] + (["--campaign"] if campaign else [])
        self.broker_id = broker_id
        self.process = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.events: "queue.Queue[dict]" = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.events.put(json.loads(line))

    def wait_event(self, key: str, timeout: float = 20.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self.events.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"member {self.broker_id} sent no {key!r}: {self.process.poll()}") from None
            if key in event:
                return event

    def kill(self) -> float:
        """kill -9; returns the monotonic time of the kill."""
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        return time.monotonic()


class Members:
    def __init__(self, chroot: str):
        self.chroot = chroot
        self.all: list[Member] = []

    def start(self, connect: str, broker_id: int, *, campaign: bool = False) -> Member:
        member = Member(connect, self.chroot, broker_id, campaign)
        self.all.append(member)
        member.wait_event("registered")
        return member

    def stop_all(self) -> None:
        for member in self.all:
            if member.process.poll() is None:
                member.process.terminate()
                try:
                    member.process.wait(10)
                except subprocess.TimeoutExpired:
                    member.kill()
