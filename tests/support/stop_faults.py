"""A broker process that kills itself (SIGKILL, as a crash would) inside its clean stop, at the
Nth syncfs of the root (broker/log_close): `python -m tests.support.stop_faults N broker start ...`.
N=1: every log closed and its files written, nothing synced at once, nothing renamed, no marker;
N=2: everything synced, then renamed into place with the markers, the last sync not done."""

from __future__ import annotations

import os
import signal
import sys

from topiclake.broker import log_close


def _dying_at(n: int):
    real = log_close.sync_filesystem
    calls = 0

    def sync_filesystem(fd: int) -> None:
        nonlocal calls
        calls += 1
        if calls == n:
            os.kill(os.getpid(), signal.SIGKILL)
        real(fd)
    return sync_filesystem


if __name__ == "__main__":
    log_close.sync_filesystem = _dying_at(int(sys.argv[1]))
    from topiclake.cli import app

    sys.argv = ["topiclake", *sys.argv[2:]]
    app()
