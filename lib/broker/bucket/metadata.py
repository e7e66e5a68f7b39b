"""The root's metadata in the bucket: what a broker needs to restart from the bucket alone.

The broker keeps writing its metadata files in the cache directory exactly as on a file root
(cluster/meta.json, topics/<t>.json, the ConfigStore files: broker-configs, group-configs,
client-quotas, acls, credentials): one seam, `MetadataMirror`, carries them to the bucket instead
of an `if` at every writer. On start it replaces the cache's copies with the bucket's; `sync`
(run by every flush tick before any data object is created, so no record of a topic is
acknowledged before the topic is in the bucket) uploads each file that changed, creating new
ones with If-None-Match and replacing known ones with If-Match on the ETag it last saw (and the
connection syncs after each request in CHANGES_METADATA, before answering it): a
conflict means another broker writes this root, and this one stops. A deleted topic's file is
deleted, and so are its partitions' objects (a topic created again under the name starts empty).

In cluster mode (several brokers on the root, ZooKeeper) every broker writes these objects, so a
lost If-Match / If-None-Match race is not a conflict that stops the broker: the winner's object is
adopted into the cache (`adopt`) and the change is made again on top of it (the service runs the
request again), and `refresh` brings the other brokers' changes into the cache (a LIST per
prefix, a GET per changed ETag), keeping any file changed here and not synced yet.

Producer-id blocks are not mirrored: each is reserved in the bucket itself with a create-once
object before any id of it is handed out (`reserve_producer_id_block`), as a cluster does with
its exclusive files.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

from topiclake.objectlog.keys import LOGS_PREFIX
from topiclake.objectlog.lease import OWNER_KEY
from topiclake.objectlog.notices import NOTICES_PREFIX
from topiclake.segments.errors import TopiclakeError, UnknownTopicError
from topiclake.segments.ownership import MODE_FILE
from topiclake.store.errors import ObjectExists, ObjectNotFound, PreconditionFailed
from topiclake.store.objects import CREATE, IfMatch, ObjectStore

from ..api_keys import ApiKey

log = logging.getLogger(__name__)

# Requests that change the root's metadata files: answered only after the mirror synced them.
CHANGES_METADATA = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS})

MIRRORED = ("cluster", "topics")
MODE_KEY = f"cluster/{MODE_FILE}"
# Not mirrored into the cache: the maintenance notices are read by the tick itself (NoticeWatcher).
LOCAL_ONLY = ("cluster/brokers/", "cluster/producer-id-blocks/", "cluster/producer_ids.json", OWNER_KEY,
              NOTICES_PREFIX + "/")
PRODUCER_ID_BLOCKS = "cluster/producer-id-blocks"
BROKER_CONFIGS = "cluster/broker-configs.json"
_TOPIC_FILE = re.compile(r"^topics/(.+)\.json$")
# A deleted topic's partition objects are deleted again this long after the first time: a leader's
# seal or flush under way at the deletion (on another broker, in cluster mode) lands its last
# objects within its deadline (flush_timeout_ms, default 10 s) after the first sweep listed.
RESWEEP_AFTER_S = (2.0, 12.0)
RESWEEP_RETRY_S = 5.0  # a sweep the store refused is tried again this much later


class MetadataConflict(TopiclakeError):
    """Another writer changed the root's metadata in the bucket: a single broker must stop; a
    cluster broker adopts the winner's objects (`keys`) and makes its change again."""

    def __init__(self, message: str, keys: list[str]):
        super().__init__(message)
        self.keys = keys


class MetadataNotStored(Exception):
    """A request's metadata change that the store refused for good (a 4xx such as 403 AccessDenied,
    which the client does not retry). The change is made in this broker's cache and every flush
    tick tries to store it again, as after a 5xx, but the request must not be answered as if it
    were in the bucket: the connection answers `response` with each entry that succeeded failed."""

    def __init__(self, response: Any, cause: Exception):
        super().__init__(f"made on this broker but not stored in the bucket (each flush tick tries again): {cause}")
        self.response = response


def _mirrored(key: str) -> bool:
    name = key.rpartition("/")[2]
    return not (name.startswith(".") or name.endswith(".tmp") or any(key.startswith(p) for p in LOCAL_ONLY))


class MetadataMirror:
    def __init__(self, store: ObjectStore, cache_root: Path, *, clock=time.monotonic,
                 resweep_after_s: tuple[float, ...] = RESWEEP_AFTER_S):
        self.store = store
        self.cache_root = Path(cache_root)
        self._clock = clock
        self._resweep_after_s = resweep_after_s
        self._resweeps: list[tuple[float, str]] = []  # (when, topic): deleted topics to sweep again
        self._etags: dict[str, str] = {}  # key -> the ETag the bucket's object had when last seen
        self._digests: dict[str, bytes] = {}  # key -> the digest of those bytes
        self._lock = threading.Lock()

    def download(self) -> int:
        """Replace the cache's metadata with the bucket's (on start, before anything reads it)."""
        with self._lock:
            for prefix in MIRRORED:
                for path in (self.cache_root / prefix).rglob("*"):
                    relative = path.relative_to(self.cache_root).as_posix()
                    if path.is_file() and _mirrored(relative):
                        path.unlink()
            count = 0
            for prefix in MIRRORED:
                for info in self.store.list(prefix):
                    if not _mirrored(info.key):
                        continue
                    self._fetch(info.key)
                    count += 1
            return count

    def refresh(self) -> list[str]:
        """Cluster mode: the bucket's changes by other brokers into the cache (new and changed
        objects fetched, deleted ones removed); a file changed here and not synced yet is kept
        (its sync decides). The keys changed in the cache."""
        with self._lock:
            local = dict(self._local_files())
            changed = []
            seen = set()
            for prefix in MIRRORED:
                for info in self.store.list(prefix):
                    if not _mirrored(info.key):
                        continue
                    seen.add(info.key)
                    if self._etags.get(info.key) == (info.etag or "") or self._pending(info.key, local):
                        continue
                    try:
                        self._fetch(info.key)
                    except ObjectNotFound:  # deleted since the listing
                        continue
                    changed.append(info.key)
            for key in sorted(set(self._digests) - seen):
                if not self._pending(key, local):
                    self._forget(key)
                    changed.append(key)
            return changed

    def adopt(self, keys: list[str]) -> None:
        """Cluster mode, after a lost race: the bucket's objects `keys` replace the cache's files."""
        with self._lock:
            for key in keys:
                try:
                    self._fetch(key)
                except ObjectNotFound:
                    self._forget(key)

    def _pending(self, key: str, local: dict[str, Path]) -> bool:
        """Whether the cache's file of `key` changed here since it was last synced or fetched."""
        path = local.get(key)
        if path is None:
            return False
        try:
            return hashlib.sha256(path.read_bytes()).digest() != self._digests.get(key)
        except FileNotFoundError:
            return False

    def _holding(self, key: str, data: bytes) -> str | None:
        """The etag of `key` if the bucket holds exactly `data`: a write of ours landed and its
        answer was lost (or was a 5xx after it was applied), so the client's retry met our own
        object (412). Anything else there is another writer's."""
        try:
            found, etag = self.store.get_with_etag(key)
        except ObjectNotFound:
            return None
        return etag if found == data else None

    def _fetch(self, key: str) -> None:
        data, etag = self.store.get_with_etag(key)
        target = self.cache_root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_name(target.name + ".tmp")  # readers never see half a file
        scratch.write_bytes(data)
        scratch.replace(target)
        self._etags[key] = etag
        self._digests[key] = hashlib.sha256(data).digest()

    def _forget(self, key: str) -> None:
        (self.cache_root / key).unlink(missing_ok=True)
        self._etags.pop(key, None)
        self._digests.pop(key, None)

    def sync(self) -> list[str]:
        """Upload every changed metadata file, delete the objects of removed ones; the keys changed."""
        with self._lock:
            changed = []
            present = set()
            # The root's mode before anything else (its cluster id above all): a root with an id and
            # no mode is a single broker's, and a broker starting meanwhile downloads what is there.
            for key, path in sorted(self._local_files(), key=lambda found: found[0] != MODE_KEY):
                try:
                    data = path.read_bytes()
                except FileNotFoundError:  # replaced or removed while listed
                    continue
                present.add(key)
                digest = hashlib.sha256(data).digest()
                if self._digests.get(key) == digest:
                    continue
                mode = IfMatch(self._etags[key]) if key in self._etags else CREATE
                try:
                    self._etags[key] = self.store.put(key, data, mode=mode)
                except (ObjectExists, PreconditionFailed) as exc:
                    landed = self._holding(key, data)
                    if landed is None:
                        raise MetadataConflict(f"{self.store.root.uri(key)} was changed by another writer: {exc}",
                                               [key]) from None
                    self._etags[key] = landed
                self._digests[key] = digest
                changed.append(key)
            for key in sorted(set(self._digests) - present):
                topic = _TOPIC_FILE.match(key)
                if topic:  # its partitions' objects first: a store error here leaves the key to the next sync
                    self._delete_partitions(topic.group(1))
                    now = self._clock()
                    self._resweeps += [(now + after, topic.group(1)) for after in self._resweep_after_s]
                self.store.delete(key)
                del self._digests[key]
                self._etags.pop(key, None)
                changed.append(key)
            self._sweep_again(present)
            return changed

    def _sweep_again(self, present: set[str]) -> None:
        """The due second sweeps of deleted topics not created again since, here or (the bucket's
        topic object: created before any of a topic's records) by another broker this one has not
        heard from yet. A store error leaves the sweep to the next sync."""
        now = self._clock()
        for entry in [(when, topic) for when, topic in self._resweeps if when <= now]:
            self._resweeps.remove(entry)
            if f"topics/{entry[1]}.json" in present:
                continue
            try:
                self._delete_partitions(entry[1], unless_created_again=True)
            except Exception as exc:  # noqa: BLE001 - flushing must go on; the sweep waits its turn
                log.warning("the objects of deleted topic %s not swept again, retried in %.0f s: %s", entry[1],
                            RESWEEP_RETRY_S, exc)
                self._resweeps.append((now + RESWEEP_RETRY_S, entry[1]))

    def _local_files(self) -> list[tuple[str, Path]]:
        found = []
        for prefix in MIRRORED:
            for path in sorted((self.cache_root / prefix).rglob("*")):
                key = path.relative_to(self.cache_root).as_posix()
                if path.is_file() and _mirrored(key):
                    found.append((key, path))
        return found

    def _delete_partitions(self, topic: str, *, unless_created_again: bool = False) -> None:
        """Delete the topic's partition objects and maintenance notices. `unless_created_again`:
        look for the topic's object in the bucket before each partition (a broker this one has
        not heard from may have created the topic again: its objects must stay)."""
        pattern = re.compile(re.escape(topic) + r"-\d+")
        deleted = 0
        for prefix in self.store.list_dir(LOGS_PREFIX).prefixes:
            if pattern.fullmatch(prefix.rpartition("/")[2]):
                if unless_created_again and self.store.head(f"topics/{topic}.json") is not None:
                    log.info("topic %s was created again: its objects stay", topic)
                    return
                for info in list(self.store.list(prefix)):
                    self.store.delete(info.key)
                    deleted += 1
        for info in list(self.store.list(NOTICES_PREFIX)):
            if pattern.fullmatch(info.key.rpartition("/")[2]):
                self.store.delete(info.key)
                deleted += 1
        log.info("deleted the %d objects of topic %s", deleted, topic)


def reserve_producer_id_block(store: ObjectStore, block: int) -> int:
    """The first id of a block no broker of this root had: `<first id>` created once in the bucket."""
    taken = [int(info.key.rpartition("/")[2]) for info in store.list(PRODUCER_ID_BLOCKS)
             if info.key.rpartition("/")[2].isdigit()]
    start = max(taken) + block if taken else 0
    while True:
        try:
            store.put(f"{PRODUCER_ID_BLOCKS}/{start:020d}", b"", mode=CREATE)
            return start
        except ObjectExists:
            start += block





async def apply_metadata_changes(partitions: Any, keys: list[str]) -> None:
    """Cluster mode, on the event loop: other brokers' metadata fetched into the cache (`keys`)
    reach what this broker has open: a topic's config its open logs, the cluster-wide defaults
    every open log. (ACLs, quotas and credentials are re-read from their files when they change.)"""
    try:
        if BROKER_CONFIGS in keys:
            await partitions.apply_defaults()
        for key in keys:
            topic = _TOPIC_FILE.match(key)
            if topic and any(part.topic == topic.group(1) for part in partitions.open_partitions()):
                await partitions.apply_config(partitions.topic(topic.group(1), fresh=True))
    except UnknownTopicError:
        pass  # deleted meanwhile: its partitions are resigned through ZooKeeper
    except Exception:
        log.exception("applying metadata changed by other brokers failed")
