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
    ({"remote.storage.enable": "true", "cleanup.policy": "compact"}, "remote.storage.enable=true needs cleanup"),
    ({"remote.storage.enable": "true", "local.retention.ms": "999999999999"}, "must not exceed retention.ms"),
    ({"remote.storage.enable": "true", "retention.bytes": "100", "local.retention.bytes": "-1"},
     "must not exceed retention.bytes"),
    ({"compression.gzip.level": "0"}, "compression.gzip.level=0 is below the minimum 1"),
    ({"leader.replication.throttled.replicas": "0:0,one"}, "invalid value 'one' in leader.replication"),
    ({"local.retention.bytes": "-3"}, "local.retention.bytes=-3 is below the minimum -2"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "above the maximum 1"),
    ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
    ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "must not exceed"),
    ({"preallocate": "yes"}, "preallocate"),
])
def test_bad_values_name_the_property(props, message):
    with pytest.raises(InvalidConfigError, match=message.replace(".", r"\.").replace("(", r"\(")):
        LogConfig.from_properties(props)


def test_every_kafka_4_topic_config_is_accepted_with_its_broker_synonym():
    kafka_4 = {
        "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
        "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
        "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
        "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
        "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type",
        "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
        "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
        "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
        "unclean.leader.election.enable"}
    assert set(LogConfig.property_names()) == kafka_4
    assert LogConfig.server_synonym("retention.ms") == "log.retention.ms"
    assert LogConfig.server_synonym("max.message.bytes") == "message.max.bytes"
    assert LogConfig.server_synonym("leader.replication.throttled.replicas") is None
    assert "No effect here" in LogConfig.property_spec("unclean.leader.election.enable").doc
    config = LogConfig.from_properties({"compression.gzip.level": "-1", "unclean.leader.election.enable": "true",
                                        "follower.replication.throttled.replicas": "*", "local.retention.ms": "-2"})
    assert config.to_properties(only_overrides=True) == {"unclean.leader.election.enable": "true",
                                                         "follower.replication.throttled.replicas": "*"}


def test_local_retention_bounds_the_log_only_with_remote_storage_on():
    plain = LogConfig.from_properties({"retention.ms": "5000", "local.retention.ms": "100"})
    assert plain.local_retention is plain  # no remote tier: the log is the whole history
    tiered = LogConfig.from_properties({"remote.storage.enable": "true", "retention.ms": "5000",
                                        "local.retention.ms": "100", "retention.bytes": "900"})
    assert (tiered.local_retention.retention_ms, tiered.local_retention.retention_bytes) == (100, 900)  # -2: follows
    assert tiered.to_properties(only_overrides=True)["remote.storage.enable"] == "true"


def test_an_empty_cleanup_policy_neither_deletes_nor_compacts():
    # Kafka 4: an empty policy is "delete with infinite retention" (IncrementalAlterConfigs SUBTRACT can empty it).
    config = LogConfig.from_properties({"cleanup.policy": ""})
    assert config.cleanup_policy == () and not config.delete and not config.compact
    assert config.to_properties(only_overrides=True) == {"cleanup.policy": ""}
