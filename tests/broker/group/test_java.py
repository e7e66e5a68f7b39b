from hypothesis import given, strategies as st

from topiclake.broker.group.java import compare_key, coordinator_partition, hashmap_order, string_hash_code, utils_abs

INT_MIN = -(2**31)


def test_hash_code_matches_java():
    assert string_hash_code("") == 0
    assert string_hash_code("a") == 97
    assert string_hash_code("hello") == 99162322
    assert string_hash_code("polygenelubricants") == INT_MIN
    assert string_hash_code("Aa") == string_hash_code("BB") == 2112  # the classic collision


def test_hash_code_uses_utf16_code_units():
    assert string_hash_code("é") == 0xE9
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16: 0xD83D * 31 + 0xDE00
    assert string_hash_code("\U0001F600") == 0xD83D * 31 + 0xDE00
    assert string_hash_code("日本") == 0x65E5 * 31 + 0x672C


def test_coordinator_partition():
    assert utils_abs(INT_MIN) == 0
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert coordinator_partition("a", 7) == 97 % 7
    neg = "zzzzzzzzzz"
    assert string_hash_code(neg) < 0
    assert coordinator_partition(neg, 50) == abs(string_hash_code(neg)) % 50


@given(st.text(), st.integers(1, 200))
def test_partition_in_range(group, n):
    assert 0 <= coordinator_partition(group, n) < n


def test_compare_key_is_java_order_not_code_point_order():
    # U+FF5E is above the surrogates in UTF-16 but below U+1F600 in code points.
    assert "\uff5e" < "\U0001F600"
    assert compare_key("\U0001F600") < compare_key("\uff5e")
    assert compare_key("a") < compare_key("ab") < compare_key("b")


def test_hashmap_order_is_bucket_order():
    # "b" (98) and "a" (97) land in buckets 2 and 1 of a 16-bucket table.
    assert hashmap_order(["b", "a"]) == ["a", "b"]
    # 17 hashes to bucket 1 too ("Aa"/"BB" collide): insertion order inside a bucket.
    assert hashmap_order(["BB", "Aa"]) == ["BB", "Aa"]
