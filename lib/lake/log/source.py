"""Read-only view of a partition's segment files, as the Spark driver plans from them.

Spark jobs never open a `Log` (that runs recovery, which writes): they list the `.log` files of
the partition directory, the way Kafka's LogLoader would find them, and take the log start
offset as Kafka does: max(log-start-offset checkpoint, first segment's base offset).

A maintenance job may be swapping segments while we list (`.cleaned` -> `.swap` -> old files
`.deleted` -> `.swap` renamed to `.log`): a listing that sees a `.swap` file is mid-swap, so we
list again a moment later rather than plan over a hole.

Cluster mode (the directory has `leader-epochs/`): the listing holds only the segment files that
are part of the log (`segments.leader_reads`: a fenced leader's files are skipped and named in
`skipped`), `epochs` is the history every read of this pass applies (the planner's scan, the
executors' decode, the maintenance jobs), and `limit(i)` is where reading segment i stops (the
next segment's base: a fenced leader's stale tail follows it; or the bound of a takeover in
progress). Without `leader-epochs/` nothing changes and nothing more is read than before.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from topiclake.segments.checkpoints import LOG_START_OFFSET_CHECKPOINT, read_partition_offset
from topiclake.segments.filenames import DELETED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, parse_name
from topiclake.segments.leader_epochs import EPOCHS_DIR
from topiclake.segments.leader_reads import ReadEpochs, read_epochs
from topiclake.segments.storage import StorageLayout, TopicRegistry

from ..errors import SegmentChangedError

_SWAP_RETRIES = 50
_SWAP_WAIT_S = 0.1


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """One `.log` file as seen at planning time; `inode` lets a reader notice a swap."""

    base_offset: int
    path: str
    size: int
    inode: int


@dataclass(frozen=True, slots=True)
class PartitionFiles:
    topic: str
    partition: int
    directory: str
    segments: tuple[SegmentFile, ...]
    log_start_offset: int
    epochs: ReadEpochs | None = None  # cluster mode: the leader-epoch history of this read pass
    skipped: tuple[tuple[int, str], ...] = ()  # (base offset, why) of segment files not in the log

    def limit(self, index: int) -> int | None:
        """The offset where reading segment `index` stops; None: its whole file (no epochs)."""
        if self.epochs is None:
            return None
        following = self.segments[index + 1].base_offset if index + 1 < len(self.segments) else None
        return self.epochs.limit(following)


def topic_partitions(layout: StorageLayout, topic: str) -> list[int]:
    """Partitions of a registered topic (UnknownTopicError names the topic file otherwise)."""
    return list(range(TopicRegistry(layout).get(topic).partitions))


def list_partition(layout: StorageLayout, topic: str, partition: int) -> PartitionFiles:
    directory = layout.log_dir(topic, partition)
    for _ in range(_SWAP_RETRIES):
        segments, swapping, epochs, skipped = _list_once(directory)
        if not swapping:
            break
        time.sleep(_SWAP_WAIT_S)
    else:
        raise SegmentChangedError(f"topic {topic!r} partition {partition}: {directory} stays mid-swap "
                                  f"(a .swap file for {_SWAP_RETRIES * _SWAP_WAIT_S:.0f} s); "
                                  "is a maintenance job stuck?")
    first_base = segments[0].base_offset if segments else 0
    checkpoint = read_partition_offset(directory, LOG_START_OFFSET_CHECKPOINT, topic, partition)
    return PartitionFiles(topic, partition, str(directory), tuple(segments),
                          max(first_base, checkpoint if checkpoint is not None else 0), epochs, tuple(skipped))


def _list_once(directory: Path) -> tuple[list[SegmentFile], bool, ReadEpochs | None, list[tuple[int, str]]]:
    segments = []
    swapping = False
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return [], False, None, []  # a partition that never received data has no directory yet
    has_epochs = False
    for entry in entries:
        if entry.name == EPOCHS_DIR:
            has_epochs = True
            continue
        parsed = parse_name(entry.name)
        if parsed is None or parsed.kind != LOG_SUFFIX:
            continue
        if parsed.transient == SWAP_SUFFIX:
            swapping = True
        if parsed.transient:
            continue
        try:
            st = entry.stat()
        except FileNotFoundError:
            swapping = True  # removed while listing: look again
            continue
        segments.append(SegmentFile(parsed.base_offset, entry.path, st.st_size, st.st_ino))
    segments.sort(key=lambda s: s.base_offset)
    epochs = read_epochs(directory) if has_epochs else None  # the common case costs nothing more
    if epochs is None or swapping:
        return segments, swapping, epochs, []
    try:
        counted, skipped = epochs.counted(directory, [s.base_offset for s in segments])
    except FileNotFoundError:
        return segments, True, epochs, []  # retired while we looked: list again
    kept = set(counted)
    return [s for s in segments if s.base_offset in kept], False, epochs, skipped


def open_segment(path: str, inode: int):
    """Open a planned segment for reading, following it to `<path>.deleted` when retention or a
    swap retired it after planning (Kafka keeps retired files for file.delete.delay.ms).
    Raises SegmentChangedError when the planned file is gone."""
    for candidate in (path, path + DELETED_SUFFIX):
        try:
            f = open(candidate, "rb")
        except FileNotFoundError:
            continue
        if os.fstat(f.fileno()).st_ino == inode:
            return f
        f.close()
    raise SegmentChangedError(f"segment {path} was replaced or deleted after planning (a compaction swap "
                              "or retention ran meanwhile); nothing was committed, run again")
