"""Manifest versions: which closed segments make a partition's log (docs/OBJECT-STORAGE.md,
"The manifest"). Version N+1 is created with If-None-Match, so each version has exactly one
writer; losing the race (ManifestConflict) means reload and decide again, Delta's protocol one
partition at a time. A writer whose epoch is below the newest manifest's must not commit: a newer
leader took over (StaleManifestWriter).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Callable

from topiclake.segments.errors import TopiclakeError
from topiclake.store.errors import ObjectExists
from topiclake.store.objects import CREATE, ObjectStore

from .keys import PartitionKeys, parse_manifest_name

# A field added within a format is optional and ignored by readers that predate it (a segment
# entry's unknown keys are dropped, as an older writer's successor then drops them), so builds of
# one format share a bucket, rolled forward or back. A change an older reader would misread is a
# new format, which older readers refuse.
FORMAT_VERSION = 0


class ManifestConflict(TopiclakeError):
    """Another writer created this manifest version first: reload the newest and decide again."""


class StaleManifestWriter(TopiclakeError):
    """The newest manifest was committed at a higher leader epoch than the writer's: it resigns."""


class CorruptManifest(TopiclakeError):
    pass


@dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One closed segment: its objects and the offsets it holds [base_offset, end_offset)."""

    key: str  # the .log object, relative to the root
    base_offset: int
    end_offset: int  # exclusive: the next segment's base
    size: int
    largest_timestamp: int
    index_key: str
    time_index_key: str
    # The `.txnindex` object (Kafka's aborted-transaction index) of the segment: "" when no
    # transaction aborted in it (no object); None when it was sealed before seals wrote one, so its
    # aborts are unknown until a reader scans it (docs/OBJECT-STORAGE.md, "Read path").
    txn_index_key: str | None = None


@dataclass(frozen=True, slots=True)
class Manifest:
    version: int
    leader_epoch: int  # of the writer
    log_start_offset: int = 0
    segments: tuple[SegmentEntry, ...] = field(default_factory=tuple)
    # Kafka's cleaner checkpoint (the first dirty offset), committed with the cleaned segments it
    # belongs to; None until a compaction ran. Every successor carries it.
    cleaner_offset: int | None = None

    @property
    def end_offset(self) -> int:
        """Where the closed segments end: the tail (flush objects) starts here."""
        return self.segments[-1].end_offset if self.segments else self.log_start_offset

    def __post_init__(self) -> None:
        previous_end = None
        for entry in self.segments:
            if entry.end_offset < entry.base_offset or (previous_end is not None and entry.base_offset < previous_end):
                raise CorruptManifest(f"manifest {self.version}: segment {entry.key} [{entry.base_offset}, "
                                      f"{entry.end_offset}) overlaps or runs backwards")
            previous_end = entry.end_offset

    def to_json(self) -> bytes:
        body = {"format": FORMAT_VERSION, "version": self.version, "leader_epoch": self.leader_epoch,
                "log_start_offset": self.log_start_offset, "end_offset": self.end_offset,
                "segments": [_entry_json(entry) for entry in self.segments]}
        if self.cleaner_offset is not None:  # absent until compacted: older manifests read the same
            body["cleaner_offset"] = self.cleaner_offset
        return json.dumps(body, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, *, source: str) -> "Manifest":
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT_VERSION:
                raise ValueError(f"unknown format {body.get('format')!r}")
            manifest = cls(int(body["version"]), int(body["leader_epoch"]), int(body["log_start_offset"]),
                           tuple(SegmentEntry(**{name: value for name, value in entry.items() if name in _ENTRY_FIELDS})
                                 for entry in body["segments"]),
                           None if body.get("cleaner_offset") is None else int(body["cleaner_offset"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise CorruptManifest(f"{source}: unreadable manifest ({exc})") from None
        if manifest.end_offset != int(body["end_offset"]):
            raise CorruptManifest(f"{source}: end_offset {body['end_offset']} is not where its segments end "
                                  f"({manifest.end_offset})")
        return manifest

    def successor(self, *, leader_epoch: int, segments: tuple[SegmentEntry, ...] | None = None,
                  log_start_offset: int | None = None, cleaner_offset: int | None = None) -> "Manifest":
        """Version N+1 with the changes given (the rest as in this one)."""
        return Manifest(self.version + 1, leader_epoch,
                        self.log_start_offset if log_start_offset is None else log_start_offset,
                        self.segments if segments is None else segments,
                        self.cleaner_offset if cleaner_offset is None else cleaner_offset)


_ENTRY_FIELDS = frozenset(SegmentEntry.__dataclass_fields__)


def _entry_json(entry: SegmentEntry) -> dict:
    body = asdict(entry)
    if body["txn_index_key"] is None:  # an older reader knows no such field: leave it out when unknown
        del body["txn_index_key"]
    return body


EMPTY = Manifest(version=-1, leader_epoch=0)  # before any commit: its successor is version 0


def newest_version(keys: PartitionKeys, listed: list[str]) -> int | None:
    """The highest manifest version among listed keys (relative to the root); None if none."""
    versions = [parse_manifest_name(key) for key in listed if key.startswith(keys.manifest_prefix + "/")]
    found = [version for version in versions if version is not None]
    return max(found) if found else None


def load_newest(store: ObjectStore, keys: PartitionKeys) -> Manifest:
    """The newest committed manifest, EMPTY when the partition has none."""
    newest = load_newer(store, keys, EMPTY.version)
    return EMPTY if newest is None else newest


def load_newer(store: ObjectStore, keys: PartitionKeys, known_version: int) -> Manifest | None:
    """The newest committed manifest if it is newer than `known_version`, else None: one LIST, and a
    GET only for a newer one (a leader's poll of an idle partition costs a LIST)."""
    version = newest_version(keys, [info.key for info in store.list(keys.manifest_prefix)])
    return None if version is None or version <= known_version else load_version(store, keys, version)


def load_version(store: ObjectStore, keys: PartitionKeys, version: int) -> Manifest:
    manifest = Manifest.from_json(store.get(keys.manifest(version)), source=store.root.uri(keys.manifest(version)))
    if manifest.version != version:
        raise CorruptManifest(f"{store.root.uri(keys.manifest(version))} says it is version {manifest.version}")
    return manifest


def commit(store: ObjectStore, keys: PartitionKeys, base: Manifest, new: Manifest) -> Manifest:
    """Create `new` (base's successor) once. StaleManifestWriter when `base` was committed by a
    newer epoch than `new`'s writer; ManifestConflict when another writer created the version."""
    if new.version != base.version + 1:
        raise ValueError(f"manifest {new.version} does not follow {base.version}")
    if new.leader_epoch < base.leader_epoch:
        raise StaleManifestWriter(f"{keys.prefix}: epoch {new.leader_epoch} may not commit over manifest "
                                  f"{base.version} of epoch {base.leader_epoch}")
    try:
        store.put(keys.manifest(new.version), new.to_json(), mode=CREATE)
    except ObjectExists:
        raise ManifestConflict(f"{keys.prefix}: manifest {new.version} was committed by another writer") from None
    return new


COMMIT_ATTEMPTS = 5


def commit_change(store: ObjectStore, keys: PartitionKeys, base: Manifest,
                  change: Callable[[Manifest], Manifest | None], *, attempts: int = COMMIT_ATTEMPTS) -> Manifest | None:
    """Commit `change(base)`; when another writer created that version first, reload the newest
    and commit `change(newest)` on it. `change` returns None when its change no longer applies to
    the manifest it is given (then so does this). Each attempt is `commit`, so the epoch rule holds
    (StaleManifestWriter); ManifestConflict after `attempts` lost races. This is how a leader's
    seal and a maintenance job (retention, a merge) that both change one version both land."""
    current = base
    for _attempt in range(attempts):
        new = change(current)
        if new is None:
            return None
        try:
            return commit(store, keys, current, new)
        except ManifestConflict:
            current = load_newest(store, keys)
    raise ManifestConflict(f"{store.root.uri(keys.prefix)}: {attempts} manifest commits lost to other writers")
