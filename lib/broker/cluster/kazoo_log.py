"""kazoo's connection messages, one line per event instead of one per reconnection attempt.

While ZooKeeper cannot be reached, kazoo tries the next server every 50-500 ms (our retry policy)
and logs each try ("Connecting to ...", "Connection dropped: ...", "Transition to CONNECTING"):
about a hundred lines per broker in a 15 s outage. `ConnectionLogFilter`, on the logger a
ZooKeeperCoordination hands kazoo, lets the first message of a loss through, holds back the
rest (counted), reminds once a minute while the loss lasts, and marks the recovery with how long
it took and how many messages it held back. Messages outside an outage pass unchanged.
"""

from __future__ import annotations

import logging
import threading
import time

REMINDER_S = 60.0
# kazoo's messages that say the connection is gone (client.py, protocol/connection.py)
_LOSS = ("Connection dropped", "Connection time-out", "Zookeeper connection lost", "Transition to CONNECTING",
         "Failed connecting to Zookeeper")
_BACK = "Zookeeper connection established"


class ConnectionLogFilter(logging.Filter):
    def __init__(self, clock=time.monotonic):
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        self._lost_at: float | None = None  # None: connected (or not connected yet)
        self._last_shown = 0.0
        self._held = 0

    @property
    def held(self) -> int:
        """Messages held back in the current outage."""
        return self._held

    def filter(self, record: logging.LogRecord) -> bool:
        text = str(record.msg)
        with self._lock:
            now = self._clock()
            if self._lost_at is None:
                if text.startswith(_LOSS):
                    self._lost_at = self._last_shown = now
                    self._held = 0
                return True
            if text.startswith(_BACK):
                record.msg = f"{text} after %.1f s without ZooKeeper (%d connection messages held back)"
                record.args = (*_args(record), now - self._lost_at, self._held)
                self._lost_at = None
                return True
            if now - self._last_shown >= REMINDER_S:
                self._last_shown = now
                record.msg = f"{text} (no ZooKeeper connection for %.0f s; %d connection messages held back)"
                record.args = (*_args(record), now - self._lost_at, self._held)
                return True
            self._held += 1
            return False


def _args(record: logging.LogRecord) -> tuple:
    if record.args is None:
        return ()
    return record.args if isinstance(record.args, tuple) else (record.args,)


def kazoo_logger(broker_id: int) -> logging.Logger:
    """The logger a broker's kazoo client logs to, with the filter installed once."""
    logger = logging.getLogger(f"kazoo.client.broker-{broker_id}")
    if not any(isinstance(f, ConnectionLogFilter) for f in logger.filters):
        logger.addFilter(ConnectionLogFilter())
    return logger
