"""A partition's log end, and the timestamp at an offset, read from its files by a process that
does not have the partition open: another broker of a cluster (the group coordinator reporting
lag for a partition it does not lead), or a broker that has not used the partition since start.

Nothing is opened for writing and no lock is taken: the files are read as `leader_reads` rules
them (a fenced leader's segment files and batches are not part of the log; offsets a takeover in
progress has not decided are not read). The end is the next offset after the last valid whole
batch of the last segment of the log, so it may run ahead of the leader's high watermark by the
appends being acknowledged at that moment (their fsync and fence check take milliseconds).

`LogEnds` follows each directory across calls: a call reads only the batch headers appended to
the last segment since the previous call, so following many partitions costs a directory listing
and a few small reads each time.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from . import filenames
from .batch import TimestampType, iter_batches
from .errors import CorruptRecordError
from .file_records import iter_file_headers
from .leader_epochs import EPOCHS_DIR
from .leader_reads import ReadEpochs, read_epochs

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Tail:
    """How far the last segment of a directory was read."""

    base: int
    inode: int
    entries: tuple  # the epoch history the scan was judged with
    position: int  # bytes of whole batches read
    end: int  # the next offset after the last valid batch read (the base before any)


def _log_segments(directory: Path) -> tuple[list[int], ReadEpochs | None]:
    """(the base offsets of the log's segment files, oldest first; the epochs they were judged by)."""
    bases, has_epochs = [], False
    for entry in os.scandir(directory):
        if entry.name == EPOCHS_DIR:
            has_epochs = True
            continue
        parsed = filenames.parse_name(entry.name)
        if parsed is not None and parsed.kind == filenames.LOG_SUFFIX and not parsed.transient:
            bases.append(parsed.base_offset)
    bases.sort()
    epochs = read_epochs(directory, wait_s=0) if has_epochs else None  # never wait: a later call reads on
    if epochs is None:
        return bases, None
    counted, _skipped = epochs.counted(directory, bases)
    return counted, epochs


class LogEnds:
    """Log end offsets of partition directories on shared storage, each followed incrementally."""

    def __init__(self) -> None:
        self._tails: dict[Path, _Tail] = {}

    def end_offset(self, directory: str | os.PathLike) -> int | None:
        """The log end; 0 for a partition never written (no directory); None when the files
        cannot be read now (a maintenance job swapped a segment meanwhile: ask again)."""
        directory = Path(directory)
        try:
            bases, epochs = _log_segments(directory)
            if not bases:
                self._tails.pop(directory, None)
                return 0
            return self._follow(directory, bases[-1], epochs)
        except FileNotFoundError:
            if not directory.exists():
                self._tails.pop(directory, None)
                return 0
            return None
        except (OSError, CorruptRecordError) as exc:
            log.debug("no log end for %s: %s", directory, exc)
            return None

    def _follow(self, directory: Path, base: int, epochs: ReadEpochs | None) -> int:
        path = filenames.log_file(directory, base)
        entries = (tuple(map(tuple, epochs.entries)), epochs.bound) if epochs is not None else ()
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            tail = self._tails.get(directory)
            if tail is None or (tail.base, tail.inode, tail.entries) != (base, st.st_ino, entries) \
                    or tail.position > st.st_size:
                tail = self._tails[directory] = _Tail(base, st.st_ino, entries, 0, base)
            limit = epochs.limit(None) if epochs is not None else None
            for position, header in iter_file_headers(f.fileno(), tail.position, st.st_size, source=str(path)):
                if epochs is not None and epochs.skip_reason(header, limit) is not None:
                    if limit is not None and header.base_offset >= limit:
                        break  # undecided from here on: not read yet
                else:
                    tail.end = header.last_offset + 1
                tail.position = position + header.size
        return tail.end

    def forget(self, keep: set[Path]) -> None:
        """Stop following the directories not in `keep`."""
        for directory in [d for d in self._tails if d not in keep]:
            del self._tails[directory]


def timestamp_at(directory: str | os.PathLike, offset: int) -> int | None:
    """The timestamp of the record at `offset` (of the next one the log holds, if compaction or
    retention removed it; the batch's append time on a LogAppendTime topic), read from the files;
    None when the log holds no record from there on or the files cannot be read now."""
    directory = Path(directory)
    try:
        bases, epochs = _log_segments(directory)
        start = max([i for i, b in enumerate(bases) if b <= offset], default=0)
        for i in range(start, len(bases)):
            found = _timestamp_in(directory, bases, i, epochs, offset)
            if found is not None:
                return found
    except (OSError, CorruptRecordError) as exc:
        log.debug("no timestamp at %s offset %d: %s", directory, offset, exc)
    return None


def _timestamp_in(directory: Path, bases: list[int], i: int, epochs: ReadEpochs | None, offset: int) -> int | None:
    path = filenames.log_file(directory, bases[i])
    limit = epochs.limit(bases[i + 1] if i + 1 < len(bases) else None) if epochs is not None else None
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        for position, header in iter_file_headers(f.fileno(), 0, size, source=str(path)):
            if epochs is not None and epochs.skip_reason(header, limit) is not None:
                if limit is not None and header.base_offset >= limit:
                    return None
                continue
            if header.last_offset < offset or header.is_control:
                continue
            if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                return header.max_timestamp
            data = os.pread(f.fileno(), header.size, position)
            for batch in iter_batches(data, source=str(path), allow_partial_tail=True, validate=False):
                for record in batch.records():
                    if record.offset >= offset:
                        return record.timestamp
    return None
