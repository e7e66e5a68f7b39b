"""Segment file names, exactly as Kafka's LogFileUtils builds and parses them.

A segment is named after its base offset, zero-padded to 20 digits (no grouping), plus a suffix:
`00000000000000000042.log`, `.index`, `.timeindex`, `.txnindex`; producer snapshots
(`.snapshot`) are named after their exclusive end offset. Files in the middle of a swap or a
deletion carry a second suffix: `.log.cleaned`, `.log.swap`, `.index.deleted`, ...
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

#: The files that make up one segment (the txn index exists only for transactional data).
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
#: Suffixes appended to a segment file name while a swap or a deletion is in progress.
TRANSIENT_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"

_DIGITS = 20


def offset_to_name(offset: int) -> str:
    """The 20-digit base-offset stem (Kafka's filenamePrefixFromOffset)."""
    if offset < 0:
        raise ValueError(f"a segment base offset cannot be negative: {offset}")
    return f"{offset:0{_DIGITS}d}"


_make_child = getattr(Path, "_make_child_relpath", None)
_PATH = type(Path())  # the concrete class (PosixPath)


def as_path(path: str | os.PathLike) -> Path:
    """`path` as a Path, itself if it is one (`Path(path)` parses a Path's parts again)."""
    return path if isinstance(path, Path) else Path(path)


def child(directory: str | os.PathLike, name: str) -> Path:
    """`Path(directory) / name` for a plain file name (no separator). A start builds ~30 paths
    per log (2,000 logs): pathlib re-parses every part of the directory on each `/`, which was
    a fifth of the open's Python time under cProfile; CPython's own directory walks append the
    one part (`_make_child_relpath`), as done here when it exists."""
    if _make_child is not None and type(directory) is _PATH and "/" not in name:
        return _make_child(directory, name)
    return Path(directory) / name


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return child(directory, f"{offset_to_name(offset)}{LOG_SUFFIX}{suffix}")


def index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return child(directory, f"{offset_to_name(offset)}{INDEX_SUFFIX}{suffix}")


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return child(directory, f"{offset_to_name(offset)}{TIME_INDEX_SUFFIX}{suffix}")


def txn_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return child(directory, f"{offset_to_name(offset)}{TXN_INDEX_SUFFIX}{suffix}")


def snapshot_file(directory: Path, offset: int) -> Path:
    return child(directory, f"{offset_to_name(offset)}{SNAPSHOT_SUFFIX}")


def segment_file(directory: Path, offset: int, suffix: str) -> Path:
    """Any file of a segment: `suffix` is one of SEGMENT_SUFFIXES (possibly + a transient one)."""
    return child(directory, f"{offset_to_name(offset)}{suffix}")


def offset_from_name(name: str | Path) -> int:
    """Base offset from a file name (Kafka: parseLong of everything before the first dot)."""
    name = Path(name).name
    stem, dot, _ = name.partition(".")
    if not dot or not stem.isdigit() or not stem.isascii():
        raise ValueError(f"{name!r} is not a segment file name (expected 20 digits and a suffix)")
    return int(stem)




@dataclass(frozen=True, slots=True)
class ParsedName:
    """`00000000000000000042.index.swap` -> ParsedName(42, ".index", ".swap")."""

    base_offset: int
    kind: str  # one of SEGMENT_SUFFIXES or SNAPSHOT_SUFFIX
    transient: str = ""  # "", ".deleted", ".cleaned" or ".swap"


def parse_name(name: str | Path) -> ParsedName | None:
    """Parse a file name of a partition directory; None for files that are not segment files
    (checkpoints, partition.metadata, the clean-shutdown marker...)."""
    name = os.path.basename(name)  # not Path(name).name: a loader parses every name it lists
    stem, dot, rest = name.partition(".")
    if not dot or len(stem) != _DIGITS or not stem.isdigit() or not stem.isascii():
        return None
    suffix = "." + rest
    transient = ""
    for candidate in TRANSIENT_SUFFIXES:
        if suffix.endswith(candidate) and suffix != candidate:
            transient = candidate
            suffix = suffix[: -len(candidate)]
            break
    if suffix not in SEGMENT_SUFFIXES and suffix != SNAPSHOT_SUFFIX:
        return None
    return ParsedName(int(stem), suffix, transient)


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int]:
    """`my-topic-3` -> ("my-topic", 3); topics may contain '-', so split at the last one."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not number.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(number)
