"""Maintenance notices (docs/OBJECT-STORAGE.md, "Maintenance"): after a maintenance job (retention,
a merge, a compaction) commits a partition's manifest, it overwrites that partition's notice under
one root-wide prefix, so a leader finds the commits of all its partitions with one LIST of that
prefix instead of one LIST per partition. A notice is a hint: the manifest stays the truth, and a
job killed between its commit and its notice is caught by the leader's slow full poll.

    cluster/maintenance/<topic>-<p>    the version of the last manifest a job committed (text)
"""

from __future__ import annotations

import logging
from datetime import datetime

from topiclake.store.errors import ObjectStoreError
from topiclake.store.objects import ObjectStore

from .keys import PartitionKeys

log = logging.getLogger(__name__)

NOTICES_PREFIX = "cluster/maintenance"


def notice_key(keys: PartitionKeys) -> str:
    return f"{NOTICES_PREFIX}/{keys.prefix.rpartition('/')[2]}"


def post_notice(store: ObjectStore, keys: PartitionKeys, version: int) -> None:
    """After a job's commit of manifest `version`. A failed PUT (the server gone, or refusing it)
    only delays the leader's pick-up to its slow poll; the commit stands, so the job must not fail:
    it is logged, not raised."""
    try:
        store.put(notice_key(keys), str(version).encode())
    except ObjectStoreError as exc:
        log.warning("%s: no maintenance notice for manifest %d (the leader's slow poll finds it): %s",
                    keys.prefix, version, exc)


class NoticeWatcher:
    """What changed under NOTICES_PREFIX since the last look, by ETag and modification time (no
    GET: a changed notice only tells the leader which partitions' manifests to look at)."""

    def __init__(self, store: ObjectStore):
        self.store = store
        self._seen: dict[str, tuple[str | None, datetime]] | None = None  # None: never listed

    def changed(self) -> set[str] | None:
        """The notice keys changed since the last call; None on the first call (every partition
        may have changed before it: the caller looks at all it leads)."""
        listed = {info.key: (info.etag, info.last_modified) for info in self.store.list(NOTICES_PREFIX)}
        before, self._seen = self._seen, listed
        if before is None:
            return None
        return {key for key, stamp in listed.items() if before.get(key) != stamp}
