"""Rebuild the registry's state from `_schemas` segment files in shared storage, without a broker
(as the Spark jobs read every other topic): list the partition's `.log` files, walk their
batches, and replay the committed records through RegistryState.replay.

Read-only: no Log is opened (its recovery writes). A torn tail (the broker mid-append) is not
read; a segment swapped or deleted by a maintenance job while we read makes us list again. In
cluster mode only the valid log is replayed (segments.leader_reads): a fenced registry writer's
late records are no schemas.

On a bucket root (`load_bucket_state`) the partition's valid batches come from objectlog's
reader (closed segments and flush objects, each offset once, by the bucket's epoch history).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from topiclake.segments.leader_reads import log_batches, read_epochs
from topiclake.segments.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_partition_offset
from topiclake.segments.errors import TopiclakeError
from topiclake.segments.filenames import LOG_SUFFIX, parse_name
from topiclake.segments.storage import StorageLayout

from .config import SCHEMAS_TOPIC
from .log_records import committed_records
from .state import RegistryState

_ATTEMPTS = 20
_RETRY_WAIT_S = 0.1


class SchemasLogChanged(TopiclakeError):
    """The `_schemas` segments kept changing while being read (a maintenance job mid-swap)."""


def load_state(root: str | os.PathLike, topic: str = SCHEMAS_TOPIC) -> RegistryState:
    """The registry as `_schemas` in the storage root holds it (an empty registry without the topic)."""
    directory = StorageLayout(Path(root)).log_dir(topic, 0)
    for _ in range(_ATTEMPTS):
        try:
            return _load(directory, topic)
        except FileNotFoundError:  # a segment retired between listing and reading
            time.sleep(_RETRY_WAIT_S)
    raise SchemasLogChanged(f"{directory}: segments kept changing while being read; is a maintenance job stuck?")


def _load(directory: Path, topic: str) -> RegistryState:
    state = RegistryState()
    segments = sorted((parsed.base_offset, entry.path) for entry in _entries(directory)
                      if (parsed := parse_name(entry.name)) is not None and parsed.kind == LOG_SUFFIX
                      and not parsed.transient)
    epochs = read_epochs(directory) if segments else None
    if epochs is not None:
        counted = set(epochs.counted(directory, [base for base, _path in segments])[0])
        segments = [(base, path) for base, path in segments if base in counted]
    start = read_partition_offset(directory, LOG_START_OFFSET_CHECKPOINT, topic, 0) or 0
    batches = []
    end = start
    for i, (_base, path) in enumerate(segments):
        with open(path, "rb") as f:
            data = f.read()
        limit = epochs.limit(segments[i + 1][0] if i + 1 < len(segments) else None) if epochs is not None else None
        for batch in log_batches(data, epochs, source=path, last=True, limit=limit, validate=True):
            if batch.header.last_offset >= start:
                batches.append(batch)
                end = batch.header.next_offset
    return _replay(state, batches, start, end)


def load_bucket_state(store, topic: str = SCHEMAS_TOPIC) -> RegistryState:
    """The registry as `_schemas` in a bucket root holds it (`store`: the root's ObjectStore); an
    empty registry without the topic."""
    from topiclake.objectlog.keys import PartitionKeys
    from topiclake.objectlog.reader import read_log, view_partition
    from topiclake.store.errors import ObjectNotFound

    keys = PartitionKeys(topic, 0)
    for _ in range(_ATTEMPTS):
        view = view_partition(store, keys)
        try:
            batches = list(read_log(store, keys, view=view))
        except ObjectNotFound:  # a flush object deleted after a seal listed before it: look again
            time.sleep(_RETRY_WAIT_S)
            continue
        start = view.manifest.log_start_offset
        return _replay(RegistryState(), batches, start, batches[-1].next_offset if batches else start)
    raise SchemasLogChanged(f"{store.root.uri(keys.prefix)}: objects kept changing while being read")


def _replay(state: RegistryState, batches: list, start: int, end: int) -> RegistryState:
    records, _ = committed_records(batches, start, end)
    for offset, key, value in records:
        state.replay_bytes(offset, key, value)
    return state


def _entries(directory: Path) -> list[os.DirEntry]:
    try:
        return list(os.scandir(directory))
    except FileNotFoundError:
        return []  # no _schemas yet: an empty registry
