"""The bucket of an upsert table's key (keys.key_hash): equal keys hash equal whatever schema
version wrote them, so a key never moves bucket (where the merge would not meet its old row)."""

from __future__ import annotations

import decimal

import pyarrow as pa
from hypothesis import given, strategies as st

from topiclake.lake.keyed.keys import bucket_of, key_hash


def hashes(column: pa.Array) -> list[int]:
    return key_hash(pa.table({"key": column}), ("key",)).tolist()


def test_a_record_key_that_gains_an_optional_field_keeps_its_hash():
    v1 = pa.array([{"id": 1}, {"id": 2}], pa.struct([("id", pa.int64())]))
    v2 = pa.array([{"id": 1, "region": None}, {"id": 2, "region": "eu"}],
                  pa.struct([("id", pa.int64()), ("region", pa.string())]))
    assert hashes(v1)[0] == hashes(v2)[0]  # {id: 1} is the same key in both versions
    assert hashes(v1)[1] != hashes(v2)[1]  # {id: 2, region: eu} is another key


def test_a_widened_key_type_keeps_the_hash():
    assert hashes(pa.array([7, -3], pa.int32())) == hashes(pa.array([7, -3], pa.int64()))
    narrow = pa.array([decimal.Decimal("1.50"), decimal.Decimal("100"), decimal.Decimal("0.00")], pa.decimal128(5, 2))
    wide = pa.array([decimal.Decimal("1.500"), decimal.Decimal("100.000"), decimal.Decimal("0.000")],
                    pa.decimal128(9, 3))
    assert hashes(narrow) == hashes(wide)
    assert len(set(hashes(narrow))) == 3


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=50), st.integers(1, 64))
def test_the_hash_of_bytes_is_stable_and_its_bucket_in_range(keys, buckets):
    table = pa.table({"key": pa.array(keys, pa.binary())})
    first = key_hash(table, ("key",))
    assert (key_hash(table, ("key",)) == first).all()
    # the same key, alone or among others, chunked or not: the same hash
    alone = [key_hash(pa.table({"key": pa.array([k], pa.binary())}), ("key",))[0] for k in keys]
    assert first.tolist() == alone
    assert all(0 <= b < buckets for b in bucket_of(table, ("key",), buckets))
