"""Segment changes for maintenance jobs (compaction, retention), crash-safe at every step.

Jobs change only closed segments, never the newest (active) one, and hold the partition lock
(`.topiclake.lock`, exclusive flock) for the whole change, so the broker's Log.refresh and the
loader never see a change half-done. If the job dies anyway, the loader repairs what it left
exactly as Kafka's LogLoader does (see loader.py):

replace_segments (compaction): write `X.log.cleaned` (+ indexes: the writer's when it built them
  with build_cleaned_indexes and says so, `indexed`, else built here; the `.txnindex.cleaned`
  keeps the old entries whose ABORT marker survived, see carry_txn_index)
  0. make each cleaned segment span the old segments it replaces (see `_span_group`);
  1. rename each cleaned segment's files `.cleaned` -> `.swap`, highest base offset first, so a
     crash in this step leaves a `.cleaned` below every `.swap` and the loader drops them all;
  2. rename every file of the old segments to `*.deleted`;
  3. rename `.swap` -> final, indexes before the .log (a .log without a .swap means "done").
delete_segments (retention): checkpoint the new log start offset first, then rename the old
  segments' files to `*.deleted`. `.deleted` files are purged after file.delete.delay.ms, so
  readers that planned on the old files can still open them for a while.

Why step 0: the loader completes a swap by deleting the regular segments with base offsets in
[first swap base, last swap's next offset). If the cleaner dropped every batch of a group's last
old segment (or of the whole group), the swap would end below that segment's base and a crash
between steps 2 and 3 would leave some old segments behind (stale or superseded records coming
back). Kafka only keeps the cleaning round's last batch (RETAIN_EMPTY); here every group gets
the same treatment: when its data ends below its last old segment, an empty batch (no records,
no producer, no timestamp: it changes no producer or transaction state, and no time index entry
points at it, which Kafka's DumpLogSegments would report as a mismatch) taking the place of the
old segments' last batch is appended, so the swap spans exactly what it replaces. A segment left
with nothing but that batch is, for retention, as old as the file (its mtime stays the replaced
segment's), as Kafka's emptied cleaned segment is.

Cluster mode (the partition has `leader-epochs/`; leader_reads): "the segments" are the files that
are part of the log, judged again under the lock with the history on disk. A fenced leader's file
is never renamed, rewritten or deleted (an empty one may even be the current leader's next
segment), the active segment is the last segment of the log (the current leader's), nothing at or
past the bound of a takeover in progress is touched, and an old segment's last batch is its last
valid one (a fenced leader's late tail is no part of it).

`TOPICLAKE_CRASH_AT=<step>` (tests only) SIGKILLs the process at that step: `swap-begin`,
`swap-partial`, `swapped`, `delete-partial`, `deleted`, `rename-partial`, `renamed`.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from . import filenames
from .atomic import fsync_dir
from .batch import NO_PARTITION_LEADER_EPOCH, NO_TIMESTAMP, BatchHeader, build_batch, iter_batches
from .checkpoints import (CLEANER_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, read_partition_offset,
                          write_partition_offset)
from .config import LogConfig
from .errors import CorruptRecordError, LocatedError
from .file_records import iter_file_headers
from .leader_reads import ReadEpochs, read_epochs
from .loader import partition_lock
from .producer_snapshot import delete_snapshots
from .segment import LogSegment
from .txn_index import read_txn_index, write_txn_index

CRASH_ENV = "TOPICLAKE_CRASH_AT"

log = logging.getLogger(__name__)


class MaintenanceError(LocatedError):
    """A maintenance request that would break the log (touch the active segment, overlap...), or a
    job's output that is not whole. Not a CorruptRecordError: the log's own bytes are fine."""


def crash_point(step: str) -> None:
    """Test hook: die like a killed job at `step` when TOPICLAKE_CRASH_AT names it."""
    if os.environ.get(CRASH_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _regular_bases(directory: Path) -> list[int]:
    bases = set()
    for path in directory.iterdir():
        parsed = filenames.parse_name(path.name)
        if parsed is not None and not parsed.transient and parsed.kind == filenames.LOG_SUFFIX:
            bases.add(parsed.base_offset)
    return sorted(bases)


def _segment_files(directory: Path, base: int, transient: str = "") -> list[Path]:
    """The existing files of a segment, indexes first and the .log last."""
    order = (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX, filenames.TXN_INDEX_SUFFIX, filenames.LOG_SUFFIX)
    paths = [filenames.segment_file(directory, base, suffix + transient) for suffix in order]
    return [p for p in paths if p.exists()]


def _partition_of(directory: Path) -> tuple[str, int]:
    return filenames.parse_partition_dir(Path(directory).resolve().name)


def _next_offset(directory: Path, base: int, config: LogConfig, transient: str = "") -> int:
    segment = LogSegment(directory, base, config, suffix=transient, writable=False)
    try:
        return segment.read_next_offset()
    finally:
        segment.release()
        segment.file.close()


def _log_bases(directory: Path) -> tuple[list[int], ReadEpochs | None, dict[int, str]]:
    """(base offsets of the log's segments, the epochs judged with, {base: why} of the regular
    .log files that are not part of the log). Call under the partition lock."""
    bases = _regular_bases(directory)
    epochs = read_epochs(directory, wait_s=0)  # no waiting under the lock: an undecided segment is left alone
    if epochs is None:
        return bases, None, {}
    counted, skipped = epochs.counted(directory, bases)
    return counted, epochs, dict(skipped)


def _check_not_active(directory: Path, bases: Iterable[int]) -> tuple[list[int], ReadEpochs | None]:
    existing, epochs, outside = _log_bases(directory)
    if not existing:
        raise MaintenanceError(f"{directory} has no segments")
    for base in bases:
        if base in outside:
            raise MaintenanceError(f"segment {base} of {directory} is not part of the log ({outside[base]}): "
                                   "jobs leave it alone")
        if base not in existing:
            raise MaintenanceError(f"segment {filenames.offset_to_name(base)} does not exist in {directory}")
        if base == existing[-1]:
            raise MaintenanceError(f"segment {base} is the active segment of {directory}: jobs never change it")
    return existing, epochs


def build_cleaned_indexes(directory: Path, base: int, config: LogConfig) -> int:
    """Check every batch of `<base>.log.cleaned` and write its `.index.cleaned` and
    `.timeindex.cleaned` (Kafka's rules); returns its next offset. A bad batch is an error, not
    a truncation: a job's output must be whole."""
    for suffix in filenames.INDEX_SUFFIXES:
        filenames.segment_file(directory, base, suffix + filenames.CLEANED_SUFFIX).unlink(missing_ok=True)
    segment = LogSegment(directory, base, config, suffix=filenames.CLEANED_SUFFIX)
    try:
        size = segment.size
        truncated = segment.recover()
        if truncated:
            raise MaintenanceError(f"{truncated} bytes at the end are not valid batches",
                                   source=str(segment.log_path), position=size - truncated)
        next_offset = segment.read_next_offset()
        segment.flush()
    finally:
        segment.close()
    return next_offset


def write_cleaned_segment(directory: Path, base: int, data: bytes, config: LogConfig,
                          last_modified_ms: int | None) -> int:
    """A compaction task's output segment: `<base>.log.cleaned` and its `.index.cleaned` and
    `.timeindex.cleaned`, indexed from the batches in memory as build_cleaned_indexes would index
    the file (the cleaner computed or checked every CRC moments ago: nothing is read back),
    synced, with the last replaced segment's mtime (as Kafka does). Returns the next offset
    (`base` when empty), which replace_segments takes as `indexed`."""
    for suffix in (filenames.LOG_SUFFIX, filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX):
        filenames.segment_file(directory, base, suffix + filenames.CLEANED_SUFFIX).unlink(missing_ok=True)
    headers = [batch.header for batch in iter_batches(data, source=f"cleaned segment {base}", validate=False)]
    segment = LogSegment(directory, base, config, suffix=filenames.CLEANED_SUFFIX)
    try:
        segment.append(data, headers)
        segment.on_become_inactive()
        segment.flush()
    finally:
        segment.close()
    if last_modified_ms is not None:
        ns = last_modified_ms * 1_000_000
        os.utime(filenames.segment_file(directory, base, filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX), ns=(ns, ns))
    return headers[-1].next_offset if headers else base


def _cleaned_next_offset(directory: Path, base: int, config: LogConfig, indexed: Mapping[int, tuple[int, int]],
                         padded: bool) -> int:
    """The next offset of cleaned segment `base`, its indexes built: by its writer (`indexed`: base
    -> (the .log.cleaned's size then, its next offset)) if they are still there and the file is
    the one indexed (no padding since), else here."""
    written = indexed.get(base)
    log_path = filenames.segment_file(directory, base, filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX)
    if (written is not None and not padded and os.stat(log_path).st_size == written[0]
            and all(filenames.segment_file(directory, base, suffix + filenames.CLEANED_SUFFIX).exists()
                    for suffix in (filenames.INDEX_SUFFIX, filenames.TIME_INDEX_SUFFIX))):
        return written[1]
    return build_cleaned_indexes(directory, base, config)


def carry_txn_index(directory: Path, base: int, old_bases: Sequence[int]) -> int:
    """Write `<base>.txnindex.cleaned`: the old segments' aborted transactions whose ABORT marker
    the cleaned segment still holds (Kafka's cleaner re-adds exactly those). Entries of markers the
    cleaner dropped go: that transaction has no data left to filter. Returns the entry count.
    An unreadable old .txnindex is skipped and the producer snapshots removed, so the broker
    rebuilds every .txnindex from the log at its next open."""
    cleaned = filenames.segment_file(directory, base, filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX)
    with open(cleaned, "rb") as f:
        markers = {h.base_offset for _pos, h in iter_file_headers(f.fileno(), 0, os.fstat(f.fileno()).st_size,
                                                                  source=str(cleaned)) if h.is_control}
    entries = []
    for old_base in old_bases:
        try:
            entries += read_txn_index(filenames.txn_index_file(directory, old_base), old_base)
        except CorruptRecordError as exc:
            log.warning("%s; the broker will rebuild the transaction indexes", exc)
            delete_snapshots(directory, above=-1)
    kept = [e for e in entries if e.last_offset in markers]
    write_txn_index(filenames.txn_index_file(directory, base, filenames.CLEANED_SUFFIX), kept)
    return len(kept)


def _last_header(path: Path, epochs: ReadEpochs | None = None, limit: int | None = None) -> BatchHeader | None:
    """The last whole batch header of a .log file (header scan; no index needed); with epochs,
    the last one that is part of the log (read up to `limit`, a fenced leader's batches skipped)."""
    last = None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        for _pos, header in iter_file_headers(f.fileno(), 0, size, source=str(path)):
            if epochs is not None and epochs.skip_reason(header, limit) is not None:
                if limit is not None and header.base_offset >= limit:
                    break  # a stale tail
                continue
            last = header
    return last


def _span_group(directory: Path, base: int, old_group: Sequence[int], config: LogConfig,
                epochs: ReadEpochs | None = None, existing: Sequence[int] = ()) -> bool:
    """Step 0 for one cleaned segment: if its data ends at or below the base of the last old
    segment it replaces (that segment was emptied, or the whole group), append an empty batch
    where the old segments' last batch was. Returns True when it padded."""
    cleaned = filenames.segment_file(directory, base, filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX)
    last_cleaned = _last_header(cleaned)
    next_offset = last_cleaned.next_offset if last_cleaned is not None else base
    last_old = old_group[-1]
    if next_offset > last_old:
        return False
    old_last = None
    for old_base in reversed(old_group):  # an empty old segment has no batch: look further back
        following = [b for b in existing if b > old_base]
        limit = epochs.limit(following[0] if following else None) if epochs is not None else None
        old_last = _last_header(filenames.log_file(directory, old_base), epochs, limit)
        if old_last is not None:
            break
    if old_last is not None and old_last.next_offset > last_old:
        pad_base, delta = old_last.base_offset, old_last.last_offset_delta
    else:
        # the last old segment holds no batch: claim its base offset (a gap) with the empty batch
        pad_base, delta = last_old, 0
    if pad_base < next_offset:
        raise MaintenanceError(f"cleaned segment {base} reaches offset {next_offset - 1}, past the old segments' "
                               f"last batch at {pad_base}", source=str(cleaned))
    written = os.stat(cleaned)
    # In cluster mode the empty batch carries the epoch that owns its offsets, so readers count it
    # (and the cleaned segment it may start) as the log's, like the batch it stands in for.
    owner = epochs.history.owner(pad_base) if epochs is not None else None
    epoch = owner if owner is not None else NO_PARTITION_LEADER_EPOCH
    with open(cleaned, "ab") as f:
        f.write(build_batch((), base_offset=pad_base, last_offset_delta=delta, max_timestamp=NO_TIMESTAMP,
                            partition_leader_epoch=epoch))
    os.utime(cleaned, ns=(written.st_atime_ns, written.st_mtime_ns))  # the age the cleaner gave it
    log.info("%s: cleaned segment %d ends at %d, below old segment %d: appended an empty batch at %d", directory,
             base, next_offset, last_old, pad_base)
    return True


def segment_fingerprint(path: str | os.PathLike) -> tuple[int, int]:
    """(inode, size) of a segment file: a job compares it before swapping to be sure the segments
    it cleaned are still the ones in the log (no retention or other swap came in between)."""
    st = os.stat(path)
    return st.st_ino, st.st_size


def replace_segments(directory: str | os.PathLike, old_base_offsets: Sequence[int],
                     cleaned_files: Sequence[str | os.PathLike], config: LogConfig | None = None, *,
                     expected: Mapping[int, tuple[int, int]] | None = None,
                     indexed: Mapping[int, tuple[int, int]] | None = None) -> list[int]:
    """Swap closed segments `old_base_offsets` for the cleaned segments `cleaned_files` (paths of
    `<base>.log.cleaned` in `directory`). Returns the new segments' base offsets. `expected`:
    base offset -> segment_fingerprint of the old .log files as the cleaner read them; checked
    under the lock (MaintenanceError if one changed). `indexed`: cleaned base offset -> (size,
    next offset) of the .log.cleaned files whose writer checked them and built their indexes
    (build_cleaned_indexes, in parallel tasks); the others are checked and indexed here."""
    directory = Path(directory)
    config = config or LogConfig()
    cleaned_bases = []
    for path in cleaned_files:
        parsed = filenames.parse_name(Path(path).name)
        if (parsed is None or parsed.kind != filenames.LOG_SUFFIX or parsed.transient != filenames.CLEANED_SUFFIX
                or Path(path).resolve().parent != directory.resolve()):
            raise MaintenanceError(f"{path} is not a <base>.log.cleaned file in {directory}")
        cleaned_bases.append(parsed.base_offset)
    cleaned_bases.sort()
    old = sorted(set(old_base_offsets))
    if not old or not cleaned_bases:
        raise MaintenanceError(f"replace_segments in {directory} needs old segments and cleaned files")
    with partition_lock(directory):
        existing, epochs = _check_not_active(directory, old)
        for base, fingerprint in (expected or {}).items():
            if segment_fingerprint(filenames.log_file(directory, base)) != tuple(fingerprint):
                raise MaintenanceError(f"segment {base} changed since it was cleaned (retention or another "
                                       "compaction ran meanwhile)", source=str(directory))
        for base in cleaned_bases:  # the loader may have removed them (a broker restart)
            if not filenames.segment_file(directory, base, filenames.LOG_SUFFIX + filenames.CLEANED_SUFFIX).exists():
                raise MaintenanceError(f"cleaned segment {base} is gone (removed by a log load?)",
                                       source=str(directory))
        _remove_stale_cleaned(directory, cleaned_bases)
        # The loader completes a swap by deleting the regular segments with bases in
        # [first swap base, last swap next offset): the old segments must be exactly those.
        if cleaned_bases[0] != old[0]:
            raise MaintenanceError(f"the first cleaned segment must start at the first old segment's base "
                                   f"offset {old[0]}, not {cleaned_bases[0]}", source=str(directory))
        if not set(cleaned_bases) <= set(old):
            raise MaintenanceError(f"cleaned segments {cleaned_bases} must start at old segment bases {old}",
                                   source=str(directory))
        padded = set()
        for i, base in enumerate(cleaned_bases):  # 0.
            end = cleaned_bases[i + 1] if i + 1 < len(cleaned_bases) else old[-1] + 1
            if _span_group(directory, base, [b for b in old if base <= b < end], config, epochs, existing):
                padded.add(base)
        ranges = [(base, _cleaned_next_offset(directory, base, config, indexed or {}, base in padded))
                  for base in cleaned_bases]
        for base in cleaned_bases:
            carry_txn_index(directory, base, old)
        after = [b for b in existing if b > old[-1]][0]  # exists: old never holds the active segment
        high = max(next_offset for _, next_offset in ranges)
        for (base, next_offset), following in zip(ranges, ranges[1:]):
            if next_offset > following[0]:
                raise MaintenanceError(f"cleaned segments {base} and {following[0]} overlap", source=str(directory))
        if high > after:
            raise MaintenanceError(f"cleaned data reaches offset {high - 1}, beyond the next kept segment {after}",
                                   source=str(directory))
        if high <= old[-1]:  # step 0 makes this impossible; the loader's repair depends on it
            raise MaintenanceError(f"cleaned data ends at offset {high - 1}, below the last old segment {old[-1]}",
                                   source=str(directory))
        in_range = [b for b in existing if old[0] <= b < high]
        if in_range != old:
            raise MaintenanceError(f"old segments {old} are not the contiguous segments {in_range}",
                                   source=str(directory))

        crash_point("swap-begin")
        for base in reversed(cleaned_bases):  # 1. highest first (see the module docstring)
            for path in _segment_files(directory, base, filenames.CLEANED_SUFFIX):
                os.rename(path, path.with_name(path.name[: -len(filenames.CLEANED_SUFFIX)] + filenames.SWAP_SUFFIX))
                crash_point("swap-partial")
        fsync_dir(directory)
        crash_point("swapped")
        for base in old:  # 2.
            for path in _segment_files(directory, base):
                os.rename(path, path.with_name(path.name + filenames.DELETED_SUFFIX))
                crash_point("delete-partial")
        fsync_dir(directory)
        crash_point("deleted")
        for base in cleaned_bases:  # 3.
            for path in _segment_files(directory, base, filenames.SWAP_SUFFIX):
                os.rename(path, path.with_name(path.name[: -len(filenames.SWAP_SUFFIX)]))
                crash_point("rename-partial")
        fsync_dir(directory)
        crash_point("renamed")
    log.info("replaced segments %s of %s with %s", old, directory, cleaned_bases)
    return cleaned_bases


def _remove_stale_cleaned(directory: Path, keep: Sequence[int]) -> None:
    """Other `.cleaned` files (left by a crashed job) must go before the swap: a crash in step 2
    or 3 with a `.cleaned` below our `.swap` files would make the loader drop the swap after the
    old segments were already retired."""
    for path in directory.iterdir():
        parsed = filenames.parse_name(path.name)
        if (parsed is not None and parsed.transient == filenames.CLEANED_SUFFIX
                and parsed.base_offset not in keep):
            log.warning("removing stale %s", path)
            path.unlink(missing_ok=True)
    fsync_dir(directory)


def delete_segments(directory: str | os.PathLike, base_offsets: Sequence[int], new_log_start_offset: int) -> int:
    """Retire closed segments (retention, DeleteRecords) and move the log start offset to at
    least `new_log_start_offset`, which must not fall inside a deleted segment's successor gap.
    Returns the log start offset now checkpointed."""
    directory = Path(directory)
    bases = sorted(set(base_offsets))
    topic, partition = _partition_of(directory)
    with partition_lock(directory):
        existing, _epochs = _check_not_active(directory, bases)
        remaining = [b for b in existing if b not in bases]
        if remaining[0] < bases[-1]:
            raise MaintenanceError(f"segments {bases} are not a prefix of the log: {remaining[0]} would remain "
                                   f"below them", source=str(directory))
        if new_log_start_offset < remaining[0]:
            raise MaintenanceError(f"log start offset {new_log_start_offset} would point into deleted segments "
                                   f"(first kept segment: {remaining[0]})", source=str(directory))
        current = read_partition_offset(directory, LOG_START_OFFSET_CHECKPOINT, topic, partition) or 0
        start = max(current, new_log_start_offset)
        # First the checkpoint: a crash after it only leaves segments below the start offset.
        write_partition_offset(directory, LOG_START_OFFSET_CHECKPOINT, topic, partition, start)
        for base in bases:
            for path in reversed(_segment_files(directory, base)):  # the .log first: gone at once
                os.rename(path, path.with_name(path.name + filenames.DELETED_SUFFIX))
        fsync_dir(directory)
    log.info("deleted segments %s of %s; log start offset %d", bases, directory, start)
    return start


def purge_deleted(directory: str | os.PathLike, min_age_ms: int = 0) -> int:
    """Remove `*.deleted` files renamed at least `min_age_ms` ago (their ctime is the rename)."""
    directory = Path(directory)
    cutoff = time.time() - min_age_ms / 1000
    count = 0
    for path in directory.iterdir():
        parsed = filenames.parse_name(path.name)
        if parsed is not None and parsed.transient == filenames.DELETED_SUFFIX:
            try:
                if path.stat().st_ctime <= cutoff:
                    path.unlink()
                    count += 1
            except FileNotFoundError:
                continue
    return count


def read_cleaner_offset(directory: str | os.PathLike) -> int | None:
    topic, partition = _partition_of(Path(directory))
    return read_partition_offset(Path(directory), CLEANER_OFFSET_CHECKPOINT, topic, partition)


def write_cleaner_offset(directory: str | os.PathLike, offset: int) -> None:
    topic, partition = _partition_of(Path(directory))
    write_partition_offset(Path(directory), CLEANER_OFFSET_CHECKPOINT, topic, partition, offset)


def segment_next_offset(directory: str | os.PathLike, base: int, config: LogConfig | None = None) -> int:
    return _next_offset(Path(directory), base, config or LogConfig())
