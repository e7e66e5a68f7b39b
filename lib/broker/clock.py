"""The broker's one clock (Kafka's injected `Time`): wall-clock milliseconds for record timestamps,
deadlines and expiry. Services take a `Clock` so tests can move time; production uses `SYSTEM`."""

from __future__ import annotations

import time
from typing import Callable

# Milliseconds since the epoch. A plain callable: cheap on hot paths, trivially replaced in tests.
Clock = Callable[[], int]


def system_ms() -> int:
    return int(time.time() * 1000)


SYSTEM: Clock = system_ms
