"""What the broker logs about the cluster, one line per event: the summary of a leadership change
(cluster/leadership_log.py) and kazoo's connection messages during a ZooKeeper outage
(cluster/kazoo_log.py), through real `logging` records."""

from __future__ import annotations

import logging

from topiclake.broker.cluster.kazoo_log import REMINDER_S, ConnectionLogFilter
from topiclake.broker.cluster.leadership_log import LeadershipLog, compact


def test_partition_lists_are_compacted_and_cut():
    assert compact([("o", 0), ("o", 1), ("o", 2), ("o", 5), ("a", 3)]) == "a-3, o-0..2,5"
    assert compact([("c", i) for i in range(0, 30, 3)]) == "c-0,3,6,9,12,15,18,21,..."
    assert compact([(f"t{i}", 0) for i in range(8)]) == "t0-0, t1-0, t2-0, t3-0, t4-0, t5-0 and 2 more topics"


def test_one_summary_line_per_event():
    now = [100.0]
    changes = LeadershipLog(clock=lambda: now[0])
    assert changes.empty
    changes.begin()
    for p in range(50):
        changes.took_over(("__consumer_offsets", p))
    changes.took_over(("orders", 0))
    changes.elected("leader 3 is not live")
    changes.elected("leader 2 is not live")
    changes.resigned(("orders", 1))
    now[0] += 0.21
    assert changes.summary(2, 37) == (
        "broker 2 leads 37 partitions after 210 ms of changes: wrote 2 leader changes (leader is not live); "
        "took over 51 (__consumer_offsets-0..49, orders-0); let go of 1 (orders-1)")
    assert changes.empty  # the next event starts over


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def filtered_logger(name: str, now: list[float]) -> tuple[logging.Logger, _Kept]:
    """A logger of its own with the filter (its clock reads `now[0]`) and a handler keeping what passes."""
    logger = logging.getLogger(name)
    logger.propagate = False
    kept = _Kept()
    logger.addHandler(kept)
    logger.addFilter(ConnectionLogFilter(clock=lambda: now[0]))
    logger.setLevel(logging.INFO)
    return logger, kept


def test_kazoo_connection_messages_during_an_outage_are_one_line_each_way():
    now = [0.0]
    logger, kept = filtered_logger("test.kazoo.outage", now)
    logger.info("Connecting to %s(%s):%s, use_ssl: %r", "127.0.0.1", "127.0.0.1", 2181, False)  # before: all pass
    logger.info("Zookeeper connection established, state: %s", "CONNECTED")
    for attempt in range(110):  # a 15 s outage: a try every ~140 ms
        now[0] += 0.14
        logger.warning("Connection dropped: %s", "socket connection error: Connection refused")
        logger.warning("Transition to CONNECTING") if attempt == 0 else None
        logger.info("Connecting to %s(%s):%s, use_ssl: %r", "127.0.0.1", "127.0.0.1", 2181, False)
    now[0] += 0.1
    logger.info("Zookeeper connection established, state: %s", "CONNECTED")
    logger.info("Connecting to %s(%s):%s, use_ssl: %r", "127.0.0.1", "127.0.0.1", 2181, False)  # after: all pass
    assert kept.lines[:2] == ["Connecting to 127.0.0.1(127.0.0.1):2181, use_ssl: False",
                              "Zookeeper connection established, state: CONNECTED"]
    assert kept.lines[2:] == [
        "Connection dropped: socket connection error: Connection refused",
        "Zookeeper connection established, state: CONNECTED after 15.4 s without ZooKeeper "
        "(220 connection messages held back)",
        "Connecting to 127.0.0.1(127.0.0.1):2181, use_ssl: False"]


def test_a_long_outage_is_recalled_once_a_minute():
    now = [0.0]
    logger, kept = filtered_logger("test.kazoo.long", now)
    logger.warning("Connection dropped: %s", "refused")
    for _ in range(300):  # 150 s
        now[0] += 0.5
        logger.warning("Connection dropped: %s", "refused")
    assert len(kept.lines) == 1 + int(150 // REMINDER_S)
    assert kept.lines[1].startswith("Connection dropped: refused (no ZooKeeper connection for 60 s;")
