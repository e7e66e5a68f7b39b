"""Deleting what no manifest needs any more (docs/OBJECT-STORAGE.md, "Maintenance on the bucket",
garbage): flush objects a seal replaced, and segment and snapshot objects no manifest names (a
seal whose commit lost; segments retention dropped, a merge or a compaction replaced).

The grace (`delete_grace_ms`) is counted from when an object stopped being needed, not from when
it was created: a segment written a day ago and dropped by retention a second ago may still be
read by a Spark task planned on the manifest before. So an object is garbage only when it is
garbage under the newest manifest AND under the one that was newest `grace` ago (the reference),
and was itself created before the grace (a concurrent sealer's objects, not committed yet).

Old manifest versions go too (`delete_old_manifests`), by this rule: a version is deleted only
when it is below the newest KEEP_MANIFESTS versions AND below the reference (so it was superseded
more than the grace ago). Readers pick the newest version, never deleted; the reference stays, so
the next pass still finds the manifest newest a grace ago; and a commit creates base + 1 with
If-None-Match on a base its writer has just loaded (`manifest.commit_change` reloads before each
attempt), so a deleted version's key could be created again only by a writer whose base is more
than KEEP_MANIFESTS versions and the grace old: none is (a seal, a takeover, retention, a merge
or a compaction commits within seconds to minutes of loading the newest, far inside both).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from topiclake.store.errors import ObjectNotFound
from topiclake.store.objects import ObjectStore

from .keys import PartitionKeys, parse_flush_name, parse_manifest_name
from .manifest import Manifest, load_version
from .plan import Listed, superseded_flush_objects

DEFAULT_DELETE_GRACE_MS = 3_600_000
KEEP_MANIFESTS = 16  # the newest versions are never deleted, whatever their age
_SEGMENT_KINDS = ("log", "index", "timeindex", "txnindex", "snapshot")


def manifest_at(store: ObjectStore, keys: PartitionKeys, moment: datetime) -> Manifest | None:
    """The manifest that was the newest at `moment` (by its commit time); None if none was yet,
    or if a concurrent pruner (the broker's pass beside `merge-segments`') deleted it between the
    listing and the read: no reference, so this pass deletes nothing."""
    committed = [(version, info) for info in store.list(keys.manifest_prefix)
                 if (version := parse_manifest_name(info.key)) is not None and info.last_modified <= moment]
    if not committed:
        return None
    try:
        return load_version(store, keys, max(committed, key=lambda found: found[0])[0])
    except ObjectNotFound:
        return None


def collect_garbage(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, *,
                    grace_ms: int = DEFAULT_DELETE_GRACE_MS, now: datetime | None = None,
                    dry_run: bool = False) -> list[str]:
    """Both passes below against `manifest` (the newest) and the reference; the keys deleted
    (with `dry_run`, the keys that would be)."""
    now = now or datetime.now(timezone.utc)
    reference = manifest_at(store, keys, now - timedelta(milliseconds=grace_ms))
    return (delete_superseded(store, keys, manifest, reference, grace_ms=grace_ms, now=now, dry_run=dry_run)
            + delete_unreferenced(store, keys, manifest, reference, grace_ms=grace_ms, now=now, dry_run=dry_run)
            + delete_old_manifests(store, keys, manifest, reference, dry_run=dry_run))


def delete_superseded(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, reference: Manifest | None, *,
                      grace_ms: int = DEFAULT_DELETE_GRACE_MS, now: datetime | None = None,
                      dry_run: bool = False) -> list[str]:
    """Delete the flush objects that a seal replaced at least the grace ago (superseded under
    `reference`, the manifest newest then); created before the grace too. The keys deleted."""
    if reference is None:
        return []  # nothing was sealed a grace ago
    now = now or datetime.now(timezone.utc)
    infos = {info.key: info for info in store.list(keys.prefix)}
    listed = [Listed(k, i.size) for k, i in infos.items()]
    old = {item.key for item in superseded_flush_objects(keys, reference, listed)}
    doomed = [item.key for item in superseded_flush_objects(keys, manifest, listed)
              if item.key in old and now - infos[item.key].last_modified >= timedelta(milliseconds=grace_ms)]
    return _delete(store, doomed, dry_run)


def delete_unreferenced(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, reference: Manifest | None, *,
                        grace_ms: int = DEFAULT_DELETE_GRACE_MS, now: datetime | None = None,
                        dry_run: bool = False) -> list[str]:
    """Delete segment and snapshot objects that neither `manifest` nor `reference` names, once
    older than the grace. Flush objects are delete_superseded's; snapshots at a named segment's end
    are kept. The keys deleted."""
    now = now or datetime.now(timezone.utc)
    kept = _named(keys, manifest) | (_named(keys, reference) if reference is not None else set())
    doomed = []
    for info in store.list(keys.prefix):
        relative = keys.relative(info.key)
        if relative is None or "/" in relative or parse_flush_name(relative) is not None:
            continue  # the fence, the manifests, flush objects: not segment objects
        kind = relative.partition(".")[2]
        if not (kind in _SEGMENT_KINDS or kind[:1] in ("s", "m", "c")):  # .s<epoch>.log, .m<version>.log, .c...
            continue
        if info.key not in kept and now - info.last_modified >= timedelta(milliseconds=grace_ms):
            doomed.append(info.key)
    return _delete(store, doomed, dry_run)


def delete_old_manifests(store: ObjectStore, keys: PartitionKeys, manifest: Manifest, reference: Manifest | None, *,
                         keep: int = KEEP_MANIFESTS, dry_run: bool = False) -> list[str]:
    """Delete the manifest versions below both the newest `keep` (from `manifest`, the newest)
    and `reference` (the newest a grace ago): the module's rule. The keys deleted."""
    if reference is None:
        return []  # nothing was committed a grace ago
    floor = min(reference.version, manifest.version - keep + 1)
    doomed = [info.key for info in store.list(keys.manifest_prefix)
              if (version := parse_manifest_name(info.key)) is not None and version < floor]
    return _delete(store, doomed, dry_run)


def _named(keys: PartitionKeys, manifest: Manifest) -> set[str]:
    named = {key for entry in manifest.segments
             for key in (entry.key, entry.index_key, entry.time_index_key, entry.txn_index_key) if key}
    return named | {keys.snapshot(entry.end_offset) for entry in manifest.segments}


def _delete(store: ObjectStore, doomed: list[str], dry_run: bool) -> list[str]:
    for key in doomed if not dry_run else ():
        store.delete(key)
    return doomed
