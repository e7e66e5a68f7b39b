"""OffsetForLeaderEpoch (key 23) on a broker alone on a file root, over a real socket: it leads
every partition at epoch 0, so epoch 0 ends at the log end and any other epoch is unknown
(Kafka's LeaderEpochFileCache.endOffsetFor); a client's stale or future current epoch is refused."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from tests.support.wire import batch, offset_for_epoch, produce


def test_epoch_zero_ends_at_the_log_end_on_a_broker_alone(broker):
    broker.create_topic("epochs")
    with broker.client() as c:
        assert produce(c, "epochs", batch([b"a", b"b", b"c"])).error_code == ErrorCode.none
        found = offset_for_epoch(c, "epochs", 0, current=0)
        assert (found.error_code, found.leader_epoch, found.end_offset) == (ErrorCode.none, 0, 3)
        above = offset_for_epoch(c, "epochs", 4)  # an epoch this log never had: undefined
        assert (above.error_code, above.leader_epoch, above.end_offset) == (ErrorCode.none, -1, -1)
        assert offset_for_epoch(c, "epochs", 0, current=1).error_code == ErrorCode.unknown_leader_epoch
        assert offset_for_epoch(c, "epochs", 0, partition=3).error_code == ErrorCode.unknown_topic_or_partition
        assert offset_for_epoch(c, "nope", 0).error_code == ErrorCode.unknown_topic_or_partition
