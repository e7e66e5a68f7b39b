"""`__transaction_state` record serde: Kafka's TransactionLogKey v0 / TransactionLogValue v0-v1 bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from topiclake.broker.txn import records
from topiclake.broker.txn.state import S, TxnMetadata, TxnState
from topiclake.segments.errors import CorruptRecordError


def test_key_bytes():
    assert records.encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert records.decode_key(b"\x00\x00\x00\x02tx") == "tx"


def test_value_v0_bytes_match_kafkas_layout():
    m = TxnMetadata("tx", 5, 1, 60_000, S.ONGOING, frozenset({("t", 1), ("t", 0), ("a", 3)}), 100, 200)
    expected = (struct.pack(">hqhib", 0, 5, 1, 60_000, 1)
                + struct.pack(">i", 2)  # two topics, sorted
                + struct.pack(">h", 1) + b"a" + struct.pack(">ii", 1, 3)
                + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 1)
                + struct.pack(">qq", 200, 100))  # last update, then start
    assert records.encode_value(m) == expected
    assert records.decode_value("tx", expected) == m


def test_empty_state_writes_null_partitions_and_complete_an_empty_array():
    empty = TxnMetadata("tx", 5, 0, 1000, S.EMPTY, update_ms=7)
    assert records.encode_value(empty)[17:21] == b"\xff\xff\xff\xff"
    done = TxnMetadata("tx", 5, 0, 1000, S.COMPLETE_COMMIT, start_ms=3, update_ms=7)
    assert records.encode_value(done)[17:21] == b"\x00\x00\x00\x00"
    assert records.decode_value("tx", records.encode_value(empty)) == empty
    with pytest.raises(ValueError):
        records.encode_value(TxnMetadata("tx", 5, 0, 1000, S.EMPTY, frozenset({("t", 0)})))


def test_value_v1_flexible_with_tagged_fields():
    m = TxnMetadata("tx", 5, 1, 60_000, S.PREPARE_ABORT, frozenset({("t", 0)}), 100, 200, prev_producer_id=3,
                    client_txn_version=2)
    data = records.encode_value(m, version=1)
    expected = (struct.pack(">hqhib", 1, 5, 1, 60_000, 3)
                + b"\x02"  # compact array: 1 topic
                + b"\x02t" + b"\x02" + struct.pack(">i", 0) + b"\x00"  # topic, partitions, entry tags
                + struct.pack(">qq", 200, 100)
                + b"\x02" + b"\x00\x08" + struct.pack(">q", 3) + b"\x02\x02" + struct.pack(">h", 2))
    assert data == expected
    assert records.decode_value("tx", data) == m


def test_unknown_tags_are_skipped():
    m = TxnMetadata("tx", 5, 1, 60_000, S.COMPLETE_ABORT, frozenset(), 100, 200)
    data = records.encode_value(m, version=1)
    assert data.endswith(b"\x00")
    patched = data[:-1] + b"\x01\x09\x02zz"  # one unknown tag (9) of two bytes
    assert records.decode_value("tx", patched) == m


@pytest.mark.parametrize("data,reason", [
    (b"\x00\x02" + b"\x00" * 40, "unknown TransactionLogValue version"),
    (struct.pack(">hqhib", 0, 1, 0, 1, 9) + b"\xff\xff\xff\xff" + b"\x00" * 16, "unknown transaction status"),
    (struct.pack(">hqhib", 0, 1, 0, 1, 1) + struct.pack(">i", 1000), "cannot fit"),
    (records.encode_value(TxnMetadata("tx", 1, 0, 1, S.EMPTY)) + b"!", "trailing"),
    (records.encode_value(TxnMetadata("tx", 1, 0, 1, S.EMPTY))[:-1], "needs 8 bytes"),
])
def test_malformed_values_raise_corrupt_record(data, reason):
    with pytest.raises(CorruptRecordError, match=reason) as e:
        records.decode_value("tx", data)
    assert "'tx'" in str(e.value)


def test_tombstone():
    assert records.encode_value(None) is None
    rec = records.decode_record(records.encode_key("gone"), None)
    assert rec == records.TxnLogRecord("gone", None)


_states = st.sampled_from([s for s in TxnState if s is not TxnState.EMPTY])
_parts = st.frozensets(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 2**31 - 1)), max_size=6)


@given(txn_id=st.text(max_size=20), pid=st.integers(-1, 2**63 - 1), epoch=st.integers(-1, 32767),
       timeout=st.integers(1, 2**31 - 1), state=_states, parts=_parts,
       start=st.integers(-1, 2**62), update=st.integers(-1, 2**62), version=st.sampled_from([0, 1]),
       prev=st.integers(-1, 2**62))
def test_round_trip(txn_id, pid, epoch, timeout, state, parts, start, update, version, prev):
    m = TxnMetadata(txn_id, pid, epoch, timeout, state, parts, start, update,
                    prev_producer_id=prev if version else -1)
    assert records.decode_record(records.encode_key(txn_id), records.encode_value(m, version)).metadata == m
