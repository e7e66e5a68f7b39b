"""Transactions v2 (KIP-890 part 2) over the wire, as a Kafka 4.x producer speaks them: the
transaction.version feature in ApiVersions, no AddPartitionsToTxn/AddOffsetsToTxn (Produce v12
and TxnOffsetCommit v5 add the partitions), EndTxn v5 bumping the epoch of every transaction and
returning it, retries, the fencing of what an ended transaction still sends, and a restart.
No client installed here speaks it (librdkafka, kafka-python and aiokafka stop at EndTxn v3/v4),
so these are raw kio requests."""

from __future__ import annotations

import time

import pytest
from kio.schema.api_versions.v3 import request as versions3
from kio.schema.api_versions.v4 import request as versions4
from kio.schema.end_txn.v5 import request as end5
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8 import request as fetch_offsets
from kio.schema.produce.v12 import request as produce12
from kio.schema.txn_offset_commit.v5 import request as commit5

from topiclake.broker.txn.coordinator import OFFSETS_TOPIC
from topiclake.broker.txn.state import MAX_EPOCH, S, TV2, end_transaction_v2
from topiclake.segments.batch import iter_batches

from tests.support.in_process_broker import InProcessBroker
from tests.support import txn_wire as raw

TXN = "tv2"
GROUP = "tv2-group"


@pytest.fixture
def txn_broker(tmp_path):
    b = InProcessBroker(tmp_path / "data").start()
    b.create_topic("t", 2)
    yield b
    b.stop()


def produce(client, pid, epoch, seq, values, partition=0):
    resp = client.request(produce12.ProduceRequest(
        transactional_id=TXN, acks=-1, timeout=raw.TIMEOUT, topic_data=(produce12.TopicProduceData(
            name="t", partition_data=(produce12.PartitionProduceData(
                index=partition, records=raw.txn_batch(values, pid, epoch, seq)),)),)))
    return resp.responses[0].partition_responses[0].error_code


def end(client, pid, epoch, commit):
    resp = client.request(end5.EndTxnRequest(transactional_id=TXN, producer_id=pid, producer_epoch=epoch,
                                             committed=commit))
    return resp.error_code, resp.producer_id, resp.producer_epoch


def commit_offset(client, pid, epoch, offset):
    """TxnOffsetCommit v5, retried while `__consumer_offsets` loads (as a client does)."""
    for _ in range(100):
        resp = client.request(commit5.TxnOffsetCommitRequest(
            transactional_id=TXN, group_id=GROUP, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=(commit5.TxnOffsetCommitRequestTopic(name="t", partitions=(
                commit5.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                        committed_leader_epoch=-1, committed_metadata=""),)),)))
        code = resp.topics[0].partitions[0].error_code
        if code != ErrorCode.coordinator_load_in_progress:
            return code
        time.sleep(0.05)
    return code


def committed_offset(client):
    resp = client.request(fetch_offsets.OffsetFetchRequest(require_stable=True, groups=(
        fetch_offsets.OffsetFetchRequestGroup(group_id=GROUP, topics=(
            fetch_offsets.OffsetFetchRequestTopics(name="t", partition_indexes=(0,)),)),)))
    return resp.groups[0].topics[0].partitions[0].committed_offset


def markers(client, partition=0):
    """(producer epoch, commit?) of every control batch in the partition."""
    out, offset = [], 0
    while True:
        fetched = raw.fetch(client, "t", offset, committed=False, partition=partition)
        batches = list(iter_batches(bytes(fetched.records or b"")))
        out += [(b.header.producer_epoch, b.records()[0].key[-1] == 1) for b in batches if b.is_control]
        if not batches or batches[-1].next_offset >= fetched.high_watermark:
            return out
        offset = batches[-1].next_offset


def test_api_versions_advertise_transactions_v2(txn_broker):
    with txn_broker.client() as c:
        v4 = c.request(versions4.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        v3 = c.request(versions3.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    versions = {k.api_key: k.max_version for k in v4.api_keys}
    # AddPartitionsToTxn, EndTxn, TxnOffsetCommit; Produce
    assert versions[24] == versions[26] == versions[28] == 5 and versions[0] >= 12
    for resp in (v4, v3):
        finalized = {f.name: (f.min_version_level, f.max_version_level) for f in resp.finalized_features}
        assert finalized["transaction.version"] == (2, 2) and resp.finalized_features_epoch >= 0
    assert {f.name: (f.min_version, f.max_version) for f in v4.supported_features}["transaction.version"] == (0, 2)
    assert v3.supported_features == ()  # v3 leaves out features supported from level 0 (Kafka's schema)


def test_every_transaction_bumps_the_epoch_and_fences_what_it_left_behind(txn_broker):
    with txn_broker.client() as c:
        _, pid, epoch = raw.init_producer_id(c, TXN)
        # No AddPartitionsToTxn: the first transactional batch adds its partition.
        assert produce(c, pid, epoch, 0, [b"a", b"b"]) == ErrorCode.none
        assert produce(c, pid, epoch, 2, [b"c"], partition=1) == ErrorCode.none
        assert commit_offset(c, pid, epoch, 3) == ErrorCode.none  # no AddOffsetsToTxn either
        m = txn_broker.context.txn.get(TXN)
        assert m.state is S.ONGOING and m.client_txn_version == TV2
        assert m.partitions == {("t", 0), ("t", 1), (OFFSETS_TOPIC, txn_broker.context.groups.partition_for(GROUP))}
        assert raw.latest(c, "t", committed=True) == 0

        assert end(c, pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
        assert markers(c) == [(epoch + 1, True)]  # the marker carries the bumped epoch
        assert raw.latest(c, "t", committed=True) == 3 and committed_offset(c) == 3
        # A retry of that EndTxn (the answer was lost) succeeds with the same answer ...
        assert end(c, pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
        # ... but a late batch of the ended transaction cannot start a new one (the KIP-890 defence).
        assert produce(c, pid, epoch, 3, [b"zombie"]) == ErrorCode.producer_fenced
        assert txn_broker.context.txn.get(TXN).state is S.COMPLETE_COMMIT

        # The next transaction: the new epoch, sequences from 0; an abort bumps again.
        epoch += 1
        assert produce(c, pid, epoch, 0, [b"x"]) == ErrorCode.none
        assert end(c, pid, epoch, False) == (ErrorCode.none, pid, epoch + 1)
        assert markers(c) == [(epoch, True), (epoch + 1, False)]
        assert raw.latest(c, "t", committed=True) == 5  # the aborted record stays unread
        committed = raw.fetch(c, "t", 0, committed=True)
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(pid, 3)]

        # Commit with nothing open is refused; an abort with nothing open still bumps the epoch.
        epoch += 1
        assert end(c, pid, epoch, True)[0] == ErrorCode.invalid_txn_state
        assert end(c, pid, epoch, False) == (ErrorCode.none, pid, epoch + 1)
        assert end(c, pid, epoch - 1, True)[0] == ErrorCode.producer_fenced  # neither current nor a retry


def test_a_restart_keeps_the_bumped_epoch(tmp_path):
    root = tmp_path / "data"
    b = InProcessBroker(root).start()
    try:
        b.create_topic("t", 2)
        with b.client() as c:
            _, pid, epoch = raw.init_producer_id(c, TXN)
            produce(c, pid, epoch, 0, [b"a"])
            assert end(c, pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)
    finally:
        b.stop()
    b = InProcessBroker(root).start()
    try:
        m = b.context.txn.get(TXN)
        assert (m.producer_id, m.producer_epoch, m.state, m.client_txn_version) == (pid, epoch + 1,
                                                                                   S.COMPLETE_COMMIT, TV2)
        with b.client() as c:
            assert end(c, pid, epoch, True) == (ErrorCode.none, pid, epoch + 1)  # still a retry
            assert produce(c, pid, epoch + 1, 0, [b"b"]) == ErrorCode.none
            assert end(c, pid, epoch + 1, True) == (ErrorCode.none, pid, epoch + 2)
            assert raw.latest(c, "t", committed=True) == 4
    finally:
        b.stop()


def test_a_used_up_epoch_rotates_the_producer_id():
    from topiclake.broker.txn.state import TxnMetadata

    m = TxnMetadata(TXN, 7, MAX_EPOCH - 1, 60_000, S.ONGOING, frozenset({("t", 0)}), start_ms=1, update_ms=1)
    outcome = end_transaction_v2(m, 7, MAX_EPOCH - 1, True, 5, lambda: 8)
    assert outcome.producer == (8, 0)
    prepared = outcome.metadata
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (7, MAX_EPOCH, 8)
    from topiclake.broker.txn.state import complete

    done = complete(prepared, 6)
    assert (done.producer_id, done.producer_epoch, done.prev_producer_id, done.state) == (8, 0, 7, S.COMPLETE_COMMIT)
    # The client that lost the answer retries with the old id and epoch: the same answer.
    assert end_transaction_v2(done, 7, MAX_EPOCH - 1, True, 7, lambda: 9).producer == (8, 0)
    # The new id, epoch 0, is the next transaction's.
    begun = done.transition(S.ONGOING, partitions=frozenset({("t", 0)}))
    assert end_transaction_v2(begun, 8, 0, False, 8, lambda: 9).producer == (8, 1)


def test_records_keep_the_tagged_fields(txn_broker):
    from topiclake.broker.txn import records

    m = txn_broker.context.txn
    with txn_broker.client() as c:
        _, pid, epoch = raw.init_producer_id(c, TXN)
        produce(c, pid, epoch, 0, [b"a"])
    value = records.encode_value(m.get(TXN))
    assert value[:2] == b"\x00\x01"  # a transactions-v2 transaction is written as v1, with its tags
    assert records.decode_record(records.encode_key(TXN), value).metadata.client_txn_version == TV2
