import pytest

from topiclake.segments.config import LONG_MAX, LogConfig
from topiclake.segments.errors import InvalidConfigError


def test_kafka_defaults():
    props = LogConfig().to_properties()
    assert props["segment.bytes"] == "1073741824"
    assert props["segment.ms"] == "604800000"
    assert props["segment.index.bytes"] == "10485760"
    assert props["index.interval.bytes"] == "4096"
    assert props["flush.messages"] == str(LONG_MAX) and props["flush.ms"] == str(LONG_MAX)
    assert props["max.message.bytes"] == "1048588"
    assert props["cleanup.policy"] == "delete"
    assert props["message.timestamp.type"] == "CreateTime"
    assert props["min.cleanable.dirty.ratio"] == "0.5"
    assert props["delete.retention.ms"] == "86400000"
    assert props["file.delete.delay.ms"] == "60000"
    assert LogConfig().max_index_entries == 10485760 // 8


def test_round_trip_and_overrides():
    config = LogConfig.from_properties({"segment.bytes": "1000", "cleanup.policy": "compact,delete",
                                        "message.timestamp.type": "LogAppendTime", "preallocate": "true"})
    assert config.segment_bytes == 1000 and config.compact and config.delete and config.log_append_time
    assert LogConfig.from_properties(config.to_properties()) == config
    assert config.to_properties(only_overrides=True) == {
        "segment.bytes": "1000", "cleanup.policy": "compact,delete",
        "message.timestamp.type": "LogAppendTime", "preallocate": "true"}
    assert config.with_overrides({"segment.ms": 5}).segment_ms == 5


@pytest.mark.parametrize("props, message", [
    ({"segment.byte": "1"}, "unknown topic config 'segment.byte'"),
    ({"segment.bytes": "13"}, "segment.bytes=13 is below the minimum 14"),
    ({"segment.ms": "soon"}, "invalid value 'soon' for segment.ms"),
    ({"cleanup.policy": "shred"}, "invalid value 'shred' for cleanup.policy"),
    ({"cleanup.policy": ""}, "cleanup.policy must not be empty"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "above the maximum 1"),
    ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "must not exceed"),
    ({"preallocate": "yes"}, "preallocate"),
])
def test_bad_values_name_the_property(props, message):
    with pytest.raises(InvalidConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        LogConfig.from_properties(props)
