"""What the KIP-848 and share-group cores share: each group's records as `__consumer_offsets`
last holds them, and the bookkeeping between those and the groups in memory.

A core (ConsumerGroups, ShareGroups) keeps `groups`, `persisted` (group id -> {key: value}, what
the log says) and `_dirty` (groups changed since the last take_records), and says how its groups
become records (`_records_of`), in which order records are written and tombstoned
(`_TOMBSTONE_ORDER`, `_WRITE_ORDER`), how a group starts (`_new_group`) and what a tombstone
removes (`_replay_tombstone`).
"""

from __future__ import annotations

from typing import Any, Callable

from .records import CoordinatorRecord

GroupRecords = dict  # key -> value, the records of one group as written


class RecordedGroups:
    groups: dict[str, Any]
    persisted: dict[str, GroupRecords]
    _dirty: set[str]
    _TOMBSTONE_ORDER: tuple
    _WRITE_ORDER: tuple

    def _records_of(self, group: Any, topic_id: Callable) -> GroupRecords:
        raise NotImplementedError

    def _new_group(self, group_id: str) -> Any:
        raise NotImplementedError

    def _replay_tombstone(self, group: Any, key: Any) -> None:
        raise NotImplementedError

    def take_records(self, topic_id: Callable) -> list[CoordinatorRecord]:
        """The records that bring the log to the in-memory state of every group changed since the
        last call; from then on they count as written (on a failed append the caller reloads)."""
        out: list[CoordinatorRecord] = []
        for gid in sorted(self._dirty):
            group = self.groups.get(gid)
            new = self._records_of(group, topic_id) if group is not None else {}
            out += self.diff_records(self.persisted.get(gid, {}), new)
            if new:
                self.persisted[gid] = new
            else:
                self.persisted.pop(gid, None)
        self._dirty.clear()
        return out

    def diff_records(self, old: GroupRecords, new: GroupRecords) -> list[CoordinatorRecord]:
        """The records that turn `old` into `new`: tombstones for keys gone, values for keys changed."""
        out = [CoordinatorRecord(k, None) for t in self._TOMBSTONE_ORDER for k in old if k.type == t and k not in new]
        out += [CoordinatorRecord(k, v) for t in self._WRITE_ORDER for k, v in new.items()
                if k.type == t and old.get(k) != v]
        return out

    def _replayed_group(self, key: Any, value: Any) -> Any | None:
        """Note a record read from the log as written; the group its value applies to (made if
        new), or None for a tombstone (already applied)."""
        held = self.persisted.setdefault(key.group, {})
        if value is None:
            held.pop(key, None)
        else:
            held[key] = value
        if not held:
            del self.persisted[key.group]
        group = self.groups.get(key.group)
        if value is None:
            if group is not None:
                self._replay_tombstone(group, key)
            return None
        if group is None:
            group = self.groups[key.group] = self._new_group(key.group)
        return group
