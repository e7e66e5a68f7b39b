"""Opening a partition directory the way Kafka's LogLoader does, repairing what a crash left.

1. Transient files: `*.deleted` and `*.cleaned` are removed, and the temp files of small-file
   writes (`.<name>.*.tmp`: a crash between a write and its rename, or before a clean stop's sync)
   once atomic.STALE_TEMP_SECONDS old; `.swap` files at or above the
   smallest `.cleaned` offset belong to an unfinished split and are removed; for the other
   `.log.swap` files, the regular segments they replace ([min swap base, max swap next offset))
   are removed and the swap is completed by renaming. Index `.swap` files are removed (rebuilt).
2. Segments are opened in offset order; index files without a .log are removed; a segment with
   a missing or insane index is recovered (indexes rebuilt from its .log).
3. Without the clean-shutdown marker, every segment from the one holding the recovery point on
   is recovered; if one had to be truncated, all later segments are removed. Producer snapshots
   above the log end offset are removed (Kafka's truncateAndReload), and all of them when a swap
   was completed here (see complete_swaps).
4. The log start offset is max(checkpoint, first base offset); an empty log gets a segment at it.

The partition directory's `.topiclake.lock` (flock) serialises this with maintenance jobs, so a
broker starting up never "repairs" a swap that a job is still doing.
"""

from __future__ import annotations

import fcntl
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import filenames
from .checkpoints import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT, read_partition_offset
from .config import LogConfig
from .errors import CorruptRecordError
from .batch import HEADER_SIZE, read_header
from .leader_epochs import EpochHistory
from .atomic import remove_stale_temp_files
from .producer_snapshot import delete_snapshots
from .segment import BatchValidity, LogSegment

log = logging.getLogger(__name__)

LOCK_FILE = ".topiclake.lock"


@contextmanager
def partition_lock(directory: Path, *, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
    """flock on the partition's lock file; yields False (without the lock) if not blocking and
    someone else holds it."""
    path = os.path.join(directory, LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except FileNotFoundError:  # a new partition: its directory first
        Path(directory).mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if blocking else fcntl.LOCK_NB)
        try:
            fcntl.flock(fd, mode)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class LoadResult:
    segments: list[LogSegment]  # sorted by base offset, the last one is active
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    had_clean_shutdown: bool
    recovered: tuple[int, ...]  # base offsets of segments recovered (indexes rebuilt)
    truncated_bytes: int
    deleted: tuple[int, ...]  # base offsets of segments removed after a truncation
    created: int | None = None  # base offset of a segment created exclusively by this load (cluster mode)
    recovery_checkpoint: int | None = None  # what the recovery-point checkpoint said (None: no entry)
    start_checkpoint: int | None = None  # what the log-start-offset checkpoint said (None: no entry)
    # The directory's file names when the load ends, if the load neither removed nor created a
    # file after listing it (None: list it again). Only true until the log changes anything.
    names: frozenset[str] | None = None


SegmentCreator = Callable[[int], int]  # base offset wanted -> base offset of the file created exclusively


def load_log(directory: str | os.PathLike, config: LogConfig, *, topic: str, partition: int,
             epochs: EpochHistory | None = None, create_segment: SegmentCreator | None = None) -> LoadResult:
    """`epochs`: the partition's leader-epoch history, in cluster mode (many brokers on the root):
    batches a fenced leader wrote are not part of the log (`leader_epochs`), and a first segment
    is created with `create_segment` (exclusively: never a file another leader made)."""
    directory = filenames.as_path(directory)
    with partition_lock(directory):  # (it makes the directory)
        return _load_locked(directory, config, topic, partition, epochs, create_segment)


def _load_locked(directory: Path, config: LogConfig, topic: str, partition: int,
                 epochs: EpochHistory | None, create_segment: SegmentCreator | None) -> LoadResult:
    # One listing of the directory for the steps below (a start opens thousands), again only
    # when completing swaps changed it.
    names = os.listdir(directory)
    removed = remove_stale_temp_files(directory, names)
    if removed:
        names = [name for name in names if name not in removed]
    # In cluster mode a fenced leader may still write the marker (it cannot know it is fenced
    # before it writes), so it proves nothing: the tail is always recovered.
    had_clean_shutdown = epochs is None and filenames.CLEAN_SHUTDOWN_FILE in names
    if complete_swaps(directory, config, epochs, names):
        names = os.listdir(directory)
    recovered: dict[int, int] = {}  # base offset -> bytes truncated by its recovery
    segments, tidied = _open_segments(directory, config, recovered, epochs, names)
    # Whether `names` still lists the directory: nothing removed or created below (the caller
    # reads snapshots and transaction indexes by it instead of listing again).
    listing_current = not tidied and not recovered
    valid = epochs.is_valid if epochs is not None else None
    if epochs is not None:
        _cut_fenced_tails(segments, valid, recovered)
    start_checkpointed = read_partition_offset(directory, LOG_START_OFFSET_CHECKPOINT, topic, partition)
    checkpoint_start = start_checkpointed or 0
    checkpointed = read_partition_offset(directory, RECOVERY_POINT_CHECKPOINT, topic, partition)
    recovery_checkpoint = checkpointed or 0

    deleted: list[int] = []
    if not had_clean_shutdown and segments:
        bases = [s.base_offset for s in segments]
        # from the segment holding the recovery point (Kafka's logSegments(recoveryPoint, MAX))
        first = max([i for i, b in enumerate(bases) if b <= recovery_checkpoint], default=0)
        for i in range(first, len(segments)):
            segment = segments[i]
            if segment.base_offset not in recovered:
                recovered[segment.base_offset] = segment.recover(valid, keep_room=i == len(segments) - 1)
            truncated = recovered[segment.base_offset]
            if truncated and epochs is None:  # cluster mode: a cut tail was a fenced leader's, not damage
                for later in segments[i + 1:]:
                    log.warning("deleting segment %s after a truncated segment", later.log_path)
                    deleted.append(later.base_offset)
                    later.delete()
                segments = segments[: i + 1]
                break
        if epochs is None:  # (cluster mode always recovers the tail: no line per takeover)
            # A line per log only where recovery cut something: 2,000 lines at a start contended
            # for the log handler's lock (the broker logs how many logs it recovered in one line).
            damaged = bool(deleted) or any(recovered.values())
            log.log(logging.INFO if damaged else logging.DEBUG,
                    "recovered %s from the segment at offset %d (no clean-shutdown marker): %d segment(s), "
                    "%d bytes truncated", directory, bases[first], len(segments) - first, sum(recovered.values()))

    log_end = segments[-1].read_next_offset() if segments else checkpoint_start
    for offset in delete_snapshots(directory, above=log_end, names=names):  # they describe offsets that are gone
        log.warning("deleted producer snapshot %d of %s: above the log end offset %d", offset, directory, log_end)
        listing_current = False
    if segments and log_end < checkpoint_start:
        # Everything is below the checkpointed start (e.g. retention ran, then a crash).
        for segment in segments:
            deleted.append(segment.base_offset)
            segment.delete()
        segments = []
        log_end = checkpoint_start
    created: int | None = None
    base_created: int | None = None  # the first segment, made here for an empty log
    if not segments:
        base = base_created = create_segment(checkpoint_start) if create_segment is not None else checkpoint_start
        segments = [LogSegment(directory, base, config)]
        log_end = base
        created = base if create_segment is not None else None
    segments[-1].resize_indexes(config.segment_index_bytes)  # the active segment gets room again
    log_start = max(checkpoint_start, segments[0].base_offset)
    recovery_point = log_end if had_clean_shutdown else min(recovery_checkpoint, log_end)
    listing_current = listing_current and not deleted and not created and base_created is None
    return LoadResult(segments, log_start, recovery_point, log_end, had_clean_shutdown,
                      tuple(recovered), sum(recovered.values()), tuple(deleted), created, checkpointed,
                      start_checkpointed, frozenset(names) if listing_current else None)


def remove_clean_shutdown_marker(directory: Path, names: frozenset[str] | None) -> bool:
    """Remove the marker (the log is open: a crash from here on is not a clean shutdown);
    whether it was there. `names`: the load's listing, if still current (no unlink attempted
    where it shows no marker: 2,000 failed system calls at an unclean start)."""
    if names is not None and filenames.CLEAN_SHUTDOWN_FILE not in names:
        return False
    try:
        os.unlink(os.path.join(directory, filenames.CLEAN_SHUTDOWN_FILE))
    except FileNotFoundError:
        return False
    return True


def _cut_fenced_tails(segments: list[LogSegment], valid: BatchValidity, recovered: dict[int, int]) -> None:
    """A segment that was active when its leader was fenced may have grown since: that leader,
    paused and woken, can still write to its own file. Such bytes hold offsets the next segment
    starts at (or do not parse): recover the segment, which cuts it at the first batch that is not
    valid. A segment whose end meets the next one's start needs nothing (the common case)."""
    for segment, after in zip(segments, segments[1:]):
        if segment.base_offset in recovered:
            continue
        try:
            overlaps = segment.read_next_offset() > after.base_offset
        except CorruptRecordError:
            overlaps = True  # a torn late write
        if overlaps:
            recovered[segment.base_offset] = segment.recover(valid)


def _not_in_log(directory: Path, epochs: EpochHistory, low: int, high: int) -> set[int]:
    """Base offsets in [low, high) of the regular .log files that are not part of the log."""
    out = set()
    for path in directory.iterdir():
        parsed = filenames.parse_name(path.name)
        if (parsed is not None and not parsed.transient and parsed.kind == filenames.LOG_SUFFIX
                and low <= parsed.base_offset < high and not epochs.counts_segment(*first_batch(path))):
            out.add(parsed.base_offset)
    return out


def first_batch(path: Path) -> tuple[int | None, int | None]:
    """(base offset, partition leader epoch) of a segment file's first batch; (None, None) if empty."""
    with open(path, "rb") as f:
        head = f.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        return None, None
    header = read_header(head)
    return header.base_offset, header.partition_leader_epoch


def _open_segments(directory: Path, config: LogConfig, recovered: dict[int, int],
                   epochs: EpochHistory | None, names: list[str]) -> tuple[list[LogSegment], bool]:
    """The segments of the log, and whether an orphan index was removed. In cluster mode a
    segment file whose first batch is not valid (a fenced leader created it after the takeover)
    is not part of the log: it is left where it is, untouched, indexes and all; nor is an empty
    file unless it is the newest."""
    logs: set[int] = set()
    indexes: list[tuple[int, str]] = []
    for name in names:  # names, not Paths: a start opens thousands of directories
        parsed = filenames.parse_name(name)
        if parsed is None or parsed.transient:
            continue
        if parsed.kind == filenames.LOG_SUFFIX:
            logs.add(parsed.base_offset)
        elif parsed.kind in filenames.INDEX_SUFFIXES:
            indexes.append((parsed.base_offset, name))
    tidied = False
    for base, name in indexes:
        if base not in logs:
            log.warning("deleting orphan index file %s", directory / name)
            (directory / name).unlink(missing_ok=True)
            tidied = True
    present = set(names)
    segments = []
    bases = sorted(logs)
    for base in bases:
        if epochs is not None:
            first = first_batch(filenames.log_file(directory, base))
            # An empty file counts only as the newest one (an idle leader's active segment): an
            # empty file among others could be a fenced leader's, inside a newer leader's range.
            empty_tail = first == (None, None) and base == bases[-1]
            if not empty_tail and not epochs.counts_segment(*first):
                continue
        segment, truncated = open_segment(directory, base, config, present)
        if truncated is not None:
            recovered[base] = truncated
        segments.append(segment)
    return segments, tidied


def open_segment(directory: Path, base: int, config: LogConfig,
                 names: set[str] | None = None) -> tuple[LogSegment, int | None]:
    """Open a segment, recovering it if an index is missing or insane; (segment, bytes
    truncated by that recovery or None if it was not needed). `names`: the directory's listing,
    if the caller has it."""
    if names is None:
        missing = not (filenames.index_file(directory, base).exists()
                       and filenames.time_index_file(directory, base).exists())
    else:
        stem = filenames.offset_to_name(base)
        missing = not (stem + filenames.INDEX_SUFFIX in names and stem + filenames.TIME_INDEX_SUFFIX in names)
    segment = LogSegment(directory, base, config)
    if missing or not _indexes_sane(segment):
        log.warning("rebuilding the indexes of %s", segment.log_path)
        return segment, segment.recover()
    return segment, None


def _indexes_sane(segment: LogSegment) -> bool:
    try:
        segment.sanity_check()
    except CorruptRecordError as exc:
        log.warning("corrupt index: %s", exc)
        return False
    index = segment.offset_index
    return not index.entries or index.entry(index.entries - 1).position <= segment.size


def complete_swaps(directory: Path, config: LogConfig, epochs: EpochHistory | None = None,
                   names: list[str] | None = None) -> bool:
    """Step 1 of the load (Kafka's removeTempFilesAndCollectSwapFiles + the swap completion);
    whether it changed the directory (`names`: its listing, if the caller has it).
    In cluster mode a fenced leader's segment file may lie inside a swap's range (the cleaned
    segment spans the log's segments around it): it is not part of the log, and it is left alone."""
    swaps: list[Path] = []
    cleaned_bases: list[int] = []
    changed = False
    for name in sorted(os.listdir(directory) if names is None else names):
        if not name.endswith(filenames.TRANSIENT_SUFFIXES):  # (most names: parsed only if it may be one)
            continue
        parsed = filenames.parse_name(name)
        if parsed is None or not parsed.transient:
            continue
        changed = True
        path = directory / name
        if parsed.transient == filenames.DELETED_SUFFIX:
            path.unlink(missing_ok=True)
        elif parsed.transient == filenames.CLEANED_SUFFIX:
            cleaned_bases.append(parsed.base_offset)
            path.unlink(missing_ok=True)
        elif parsed.kind == filenames.LOG_SUFFIX:
            swaps.append(path)
        else:
            path.unlink(missing_ok=True)  # an index swap: rebuilt from the swapped-in .log
    min_cleaned = min(cleaned_bases, default=None)
    live = []
    for path in swaps:
        base = filenames.offset_from_name(path.name)
        if min_cleaned is not None and base >= min_cleaned:
            log.warning("deleting %s: it belongs to an unfinished split", path)
            path.unlink(missing_ok=True)
        else:
            live.append(path)
    if not live:
        return changed
    # Index swaps are dropped below, the .txnindex with them: the producer snapshots' promise that
    # every abort below them is in a .txnindex no longer holds, so the broker rebuilds from the log.
    delete_snapshots(directory, above=-1)
    swap_ranges = []
    for path in live:
        base = filenames.offset_from_name(path.name)
        swapped = LogSegment(directory, base, config, suffix=filenames.SWAP_SUFFIX, writable=False)
        try:
            swap_ranges.append((base, swapped.read_next_offset()))
        finally:
            swapped.release()
            swapped.file.close()
    low = min(b for b, _ in swap_ranges)
    high = max(n for _, n in swap_ranges)
    outside = set() if epochs is None else _not_in_log(directory, epochs, low, high)
    for path in directory.iterdir():
        parsed = filenames.parse_name(path.name)
        if (parsed is not None and not parsed.transient and parsed.kind in filenames.SEGMENT_SUFFIXES
                and low <= parsed.base_offset < high and parsed.base_offset not in outside):
            log.warning("deleting %s: replaced by a swap segment", path)
            path.unlink(missing_ok=True)
    for path in live:
        for suffix in filenames.INDEX_SUFFIXES:  # the old segment's indexes, if the base is reused
            filenames.segment_file(directory, filenames.offset_from_name(path.name), suffix).unlink(missing_ok=True)
        final = path.with_name(path.name[: -len(filenames.SWAP_SUFFIX)])
        os.rename(path, final)
        log.info("completed the swap of %s", final)
    return True
