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

Producer-id blocks are not mirrored: each is reserved in the bucket itself with a create-once
object before any id of it is handed out (`reserve_producer_id_block`), as a cluster does with
its exclusive files.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from pathlib import Path

from topiclake.objectlog.keys import LOGS_PREFIX
from topiclake.objectlog.lease import OWNER_KEY
from topiclake.segments.errors import TopiclakeError
from topiclake.store.errors import ObjectExists, PreconditionFailed
from topiclake.store.objects import CREATE, IfMatch, ObjectStore

from ..api_keys import ApiKey

log = logging.getLogger(__name__)

# Requests that change the root's metadata files: answered only after the mirror synced them.
CHANGES_METADATA = frozenset({
    ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_CLIENT_QUOTAS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS})

MIRRORED = ("cluster", "topics")
LOCAL_ONLY = ("cluster/brokers/", "cluster/producer-id-blocks/", "cluster/producer_ids.json", OWNER_KEY)
PRODUCER_ID_BLOCKS = "cluster/producer-id-blocks"
_TOPIC_FILE = re.compile(r"^topics/(.+)\.json$")


class MetadataConflict(TopiclakeError):
    """Another writer changed the root's metadata in the bucket: this broker must stop."""


def _mirrored(key: str) -> bool:
    name = key.rpartition("/")[2]
    return not (name.startswith(".") or name.endswith(".tmp") or any(key.startswith(p) for p in LOCAL_ONLY))


class MetadataMirror:
    def __init__(self, store: ObjectStore, cache_root: Path):
        self.store = store
        self.cache_root = Path(cache_root)
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
                    data = self.store.get(info.key)
                    target = self.cache_root / info.key
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                    self._etags[info.key] = info.etag or ""
                    self._digests[info.key] = hashlib.sha256(data).digest()
                    count += 1
            return count

    def sync(self) -> list[str]:
        """Upload every changed metadata file, delete the objects of removed ones; the keys changed."""
        with self._lock:
            changed = []
            present = set()
            for key, path in self._local_files():
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
                    raise MetadataConflict(f"{self.store.root.uri(key)} was changed by another writer: {exc}") from None
                self._digests[key] = digest
                changed.append(key)
            for key in sorted(set(self._digests) - present):
                self.store.delete(key)
                del self._digests[key]
                self._etags.pop(key, None)
                changed.append(key)
                topic = _TOPIC_FILE.match(key)
                if topic:
                    self._delete_partitions(topic.group(1))
            return changed

    def _local_files(self) -> list[tuple[str, Path]]:
        found = []
        for prefix in MIRRORED:
            for path in sorted((self.cache_root / prefix).rglob("*")):
                key = path.relative_to(self.cache_root).as_posix()
                if path.is_file() and _mirrored(key):
                    found.append((key, path))
        return found

    def _delete_partitions(self, topic: str) -> None:
        pattern = re.compile(re.escape(topic) + r"-\d+")
        for prefix in self.store.list_dir(LOGS_PREFIX).prefixes:
            if pattern.fullmatch(prefix.rpartition("/")[2]):
                for info in list(self.store.list(prefix)):
                    self.store.delete(info.key)
        log.info("deleted the objects of topic %s", topic)


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



