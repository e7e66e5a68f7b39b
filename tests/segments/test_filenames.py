from pathlib import Path

import pytest

from topiclake.segments import filenames as fn


def test_names_are_twenty_digits():
    assert fn.offset_to_name(0) == "00000000000000000000"
    assert fn.log_file(Path("/d"), 42).name == "00000000000000000042.log"
    assert fn.index_file(Path("/d"), 42, ".swap").name == "00000000000000000042.index.swap"
    assert fn.time_index_file(Path("/d"), 2**63 - 1).name == "09223372036854775807.timeindex"
    with pytest.raises(ValueError):
        fn.offset_to_name(-1)


@pytest.mark.parametrize("name, parsed", [
    ("00000000000000000042.log", fn.ParsedName(42, ".log")),
    ("00000000000000000042.timeindex.deleted", fn.ParsedName(42, ".timeindex", ".deleted")),
    ("00000000000000000007.log.cleaned", fn.ParsedName(7, ".log", ".cleaned")),
    ("00000000000000000007.index.swap", fn.ParsedName(7, ".index", ".swap")),
    ("00000000000000000129.snapshot", fn.ParsedName(129, ".snapshot")),
    ("leader-epoch-checkpoint", None), (".kafka_cleanshutdown", None), ("00000000000000000001.txt", None),
    ("42.log", None),
])
def test_parse_name(name, parsed):
    assert fn.parse_name(name) == parsed


def test_offset_from_name_and_partition_dirs():
    assert fn.offset_from_name("00000000000000000081.snapshot") == 81
    with pytest.raises(ValueError):
        fn.offset_from_name("abc.log")
    assert fn.parse_partition_dir("my-topic-12") == ("my-topic", 12)
    assert fn.partition_dir_name("__cluster_metadata", 0) == "__cluster_metadata-0"
    with pytest.raises(ValueError):
        fn.parse_partition_dir("nopartition")
