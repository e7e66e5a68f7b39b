"""The registry replayed from `_schemas` segment files that a cluster wrote: a fenced writer's late
registrations (in its old segment, or in a file it created after the takeover) are not schemas."""

from __future__ import annotations

from topiclake.registry.log_replay import load_state
from topiclake.registry.records import SchemaValue, schema_record
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.storage import StorageLayout
from tests.support.fenced_partition import lead


def registration(subject: str, schema_id: int) -> bytes:
    key, value = schema_record(SchemaValue(subject, 1, schema_id, '"string"')).encode()
    return build_batch([Record(0, 1_714_521_600_000, key, value)])


def test_a_fenced_writers_late_registrations_are_not_replayed(tmp_path):
    directory = StorageLayout(tmp_path).log_dir("_schemas", 0)
    directory.mkdir(parents=True)
    a = lead(directory, 1)
    a.append(registration("first", 1), leader_epoch=1)
    b = lead(directory, 2)  # A is paused, not dead
    a.append(registration("late-in-old-segment", 2), leader_epoch=1)
    b.append(registration("second", 2), leader_epoch=2)
    a.roll()  # a file of its own, after the takeover
    a.append(registration("late-in-own-file", 3), leader_epoch=1)
    a.flush()
    b.flush()
    try:
        state = load_state(tmp_path)
        assert sorted(state.subject_names()) == ["first", "second"]
        assert state.max_id == 2
    finally:
        a.close_handlers()
        b.close_handlers()
