"""Group offsets read from `__consumer_offsets` files that a cluster wrote (retention's
--protect-groups): a fenced coordinator's late commits are not offsets, so they can never let
retention delete what a group has not read."""

from __future__ import annotations

import struct

from topiclake.lake.log.group_offsets import OFFSETS_TOPIC, broker_committed_offsets
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.storage import StorageLayout, TopicRegistry
from tests.support.fenced_partition import lead


def commit(group: str, topic: str, partition: int, offset: int) -> bytes:
    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    key = struct.pack(">h", 1) + string(group) + string(topic) + struct.pack(">i", partition)
    value = struct.pack(">hq", 3, offset) + b"\0" * 16
    return build_batch([Record(0, 1_714_521_600_000, key, value)])


def test_a_fenced_coordinators_late_commits_do_not_count(tmp_path):
    layout = StorageLayout(tmp_path)
    TopicRegistry(layout).create(OFFSETS_TOPIC, 1)
    directory = layout.log_dir(OFFSETS_TOPIC, 0)
    a = lead(directory, 1)
    a.append(commit("g", "t", 0, 5), leader_epoch=1)
    a.append(commit("g", "t", 1, 3), leader_epoch=1)
    b = lead(directory, 2)  # A is paused, not dead
    a.append(commit("g", "t", 1, 1000), leader_epoch=1)  # late, in A's old segment
    b.append(commit("g", "t", 0, 7), leader_epoch=2)
    a.roll()
    a.append(commit("g", "t", 0, 2000), leader_epoch=1)  # late, in a file A created after the takeover
    a.flush()
    b.flush()
    try:
        assert broker_committed_offsets(layout, ["g"]) == {"g": {("t", 0): 7, ("t", 1): 3}}
    finally:
        a.close_handlers()
        b.close_handlers()
