"""The few Java behaviours Kafka's group code depends on, reproduced exactly.

Kafka hashes group ids with `String.hashCode` (partition of `__consumer_offsets`), sorts member
and instance ids with `String.compareTo`, and breaks protocol-vote ties by `HashMap` iteration
order. All three work on UTF-16 code units, not on Python's code points.
"""

from __future__ import annotations

from typing import Iterable

_INT_MIN = -(1 << 31)


def _utf16_units(s: str) -> list[int]:
    data = s.encode("utf-16-be", "surrogatepass")
    return [(data[i] << 8) | data[i + 1] for i in range(0, len(data), 2)]


def _to_int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def string_hash_code(s: str) -> int:
    """Java's `String.hashCode()`: s[0]*31^(n-1) + ... over UTF-16 units, int32 wraparound."""
    h = 0
    for unit in _utf16_units(s):
        h = (31 * h + unit) & 0xFFFFFFFF
    return _to_int32(h)


def utils_abs(value: int) -> int:
    """Kafka's `Utils.abs`: like Math.abs but Integer.MIN_VALUE maps to 0, not to itself."""
    return 0 if value == _INT_MIN else abs(value)


def coordinator_partition(key: str, partition_count: int) -> int:
    """The partition of an internal topic whose coordinator owns `key` (a group id, a transactional
    id, a share-partition's "group:topicId:partition"): Utils.abs(key.hashCode()) % partitions,
    as Kafka's group, transaction and share coordinators all pick it."""
    return utils_abs(string_hash_code(key)) % partition_count


def compare_key(s: str) -> tuple[int, ...]:
    """Sort key giving Java's `String.compareTo` order (UTF-16 code units; a supplementary
    character sorts below U+E000..U+FFFF, unlike Python's code-point order)."""
    return tuple(_utf16_units(s))


def hashmap_order(keys: Iterable[str]) -> list[str]:
    """Iteration order of a `java.util.HashMap<String, ?>` after inserting `keys` in order
    (default capacity 16, load factor 0.75; buckets by spread hash; insertion order inside a
    bucket, which a resize preserves). Used where Kafka's outcome depends on it."""
    unique = list(dict.fromkeys(keys))
    capacity = 16
    while len(unique) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = string_hash_code(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    # sorted() is stable, so keys in one bucket keep their insertion order.
    return sorted(unique, key=bucket)
