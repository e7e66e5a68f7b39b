"""One partition's open and aborted transactions: LSO, aborted ranges, rebuild from segment files."""

from __future__ import annotations

from topiclake.broker.partition_txns import PartitionTxns, scan_log
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.log import Log
from topiclake.segments.txn_metadata import AbortedTxn


def data(pid, n=1, transactional=True):
    return build_batch([Record(i, 1000, None, b"v", ()) for i in range(n)], base_offset=0, producer_id=pid,
                       producer_epoch=0, base_sequence=0, is_transactional=transactional)


def test_lso_is_the_first_open_transaction():
    t = PartitionTxns("t-0")
    assert t.last_stable_offset(10) == 10
    t.on_data(read_header(data(1)), 3)
    t.on_data(read_header(data(2)), 5)
    t.on_data(read_header(data(1)), 6)  # same transaction: the first offset stays 3
    assert t.last_stable_offset(10) == 3 and t.ongoing() == {1: 3, 2: 5}
    assert t.on_marker(1, 7, commit=True) is None
    assert t.last_stable_offset(10) == 5
    assert t.on_marker(2, 8, commit=False) == AbortedTxn(5, 2, 8)
    assert t.last_stable_offset(10) == 10
    assert t.on_marker(3, 9, commit=False) is None  # nothing open: nothing aborted here
    t.on_data(read_header(data(9, transactional=False)), 9)  # plain batches never hold the LSO
    assert t.first_unstable is None


def test_aborted_between_follows_collect_aborted_txns():
    t = PartitionTxns("t-0")
    for pid, first, marker in ((1, 0, 4), (2, 5, 9), (3, 2, 12)):
        t.on_data(read_header(data(pid)), first)
    for pid, first, marker in sorted(((1, 0, 4), (2, 5, 9), (3, 2, 12)), key=lambda x: x[2]):
        t.on_marker(pid, marker, commit=False)
    assert t.aborted_between(0, 100) == [AbortedTxn(0, 1, 4), AbortedTxn(2, 3, 12), AbortedTxn(5, 2, 9)]
    assert t.aborted_between(5, 6) == [AbortedTxn(2, 3, 12), AbortedTxn(5, 2, 9)]  # marker >= 5, first < 6
    assert t.aborted_between(10, 100) == [AbortedTxn(2, 3, 12)]
    assert t.aborted_between(0, 2) == [AbortedTxn(0, 1, 4)]
    t.forget_before(10)
    assert t.aborted() == (AbortedTxn(2, 3, 12),)


def test_scan_log_rebuilds_from_segment_files(tmp_path):
    log = Log.open(tmp_path / "t-0")
    log.append(data(1, 2))  # 0-1 aborted below
    log.append(data(2))  # 2: committed
    log.append(build_end_txn_marker(offset=0, timestamp=1, producer_id=1, producer_epoch=0, commit=False))  # 3
    log.roll()
    log.append(build_end_txn_marker(offset=0, timestamp=1, producer_id=2, producer_epoch=0, commit=True))  # 4
    log.append(data(3))  # 5: still open
    t = PartitionTxns("t-0")
    scan_log([s.path for s in log.segments()], t)
    assert t.aborted() == (AbortedTxn(0, 1, 3),)
    assert t.ongoing() == {3: 5} and t.last_stable_offset(log.high_watermark) == 5
    log.close()


def test_partition_refresh_keeps_the_index_in_step_with_retention(tmp_path):
    from topiclake.broker.partition import Partition
    from topiclake.segments.config import LogConfig
    from topiclake.segments.maintenance import delete_segments

    log = Log.open(tmp_path / "t-0")
    log.append(data(1))  # 0
    log.append(build_end_txn_marker(offset=0, timestamp=1, producer_id=1, producer_epoch=0, commit=False))  # 1
    log.roll()
    log.append(data(2))  # 2
    log.append(build_end_txn_marker(offset=0, timestamp=1, producer_id=2, producer_epoch=0, commit=False))  # 3
    log.roll()
    part = Partition("t", 0, log, LogConfig())
    part.rebuild_txn_state()
    assert [t.first_offset for t in part.txns.aborted()] == [0, 2]
    delete_segments(tmp_path / "t-0", [0], 2)  # retention drops the first segment
    part.refresh()
    assert [t.first_offset for t in part.txns.aborted()] == [2]
    log.close()


class _Watched:
    """A Log whose append lets a 'fetch' look at the partition the moment the batch is visible."""

    def __init__(self, log, look):
        self._log, self._look = log, look

    def __getattr__(self, name):
        return getattr(self._log, name)

    def append(self, *args, **kwargs):
        result = self._log.append(*args, **kwargs)
        self._look(result)
        return result


def test_a_transactions_first_batch_is_never_visible_above_the_lso(tmp_path):
    """The soak caught a read_committed consumer reading an aborted record: the first batch of a
    transaction was visible (high watermark past it) before the LSO was held at it."""
    import pytest

    from topiclake.broker.partition import Partition
    from topiclake.segments.config import LogConfig
    from topiclake.segments.errors import CorruptRecordError

    seen = []
    log = Log.open(tmp_path / "t-0")
    part = Partition("t", 0, log, LogConfig())
    part.log = _Watched(log, lambda result: seen.append((result.first_offset, part.last_stable_offset)))
    part.append_batch(data(7, transactional=False), read_header(data(7, transactional=False)), 0)  # 0
    part.append_batch(data(1, 2), read_header(data(1, 2)), 0)  # 1-2: opens a transaction
    part.append_batch(data(1), read_header(data(1)), 0)  # 3: the same one
    assert seen == [(0, 1), (1, 1), (3, 1)]
    with pytest.raises(CorruptRecordError):  # a failed append opens nothing
        part.append_batch(data(2)[:-1], read_header(data(2)), 0)
    assert part.txns.ongoing() == {1: 1} and part.last_stable_offset == 1
    log.close()


def test_an_abort_is_listed_before_the_lso_moves_past_its_data():
    t = PartitionTxns("t-0")
    t.on_data(read_header(data(1)), 0)
    views = []
    recompute = t._recompute

    def watched():  # what a fetch could see right after the LSO moves
        recompute()
        views.append((t.last_stable_offset(10), t.aborted_between(0, 10)))

    t._recompute = watched
    t.on_marker(1, 4, commit=False)
    assert views == [(10, [AbortedTxn(0, 1, 4)])]
