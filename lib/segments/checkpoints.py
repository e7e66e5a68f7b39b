"""Kafka's text offset checkpoints (CheckpointFile / OffsetCheckpointFile).

    0                      version
    2                      number of entries
    foo 0 42               <topic> <partition> <offset>
    foo 1 17

Kafka keeps one file per log directory for all partitions; topiclake keeps one per partition
directory (each partition is owned by one writer at a time, and maintenance jobs run per
partition), in the same format, so Kafka's tools can read them. An empty file (Kafka writes
`cleaner-offset-checkpoint` empty) reads as no entries.
"""

from __future__ import annotations

import os
from pathlib import Path

from .atomic import atomic_write, read_small
from .errors import CorruptRecordError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
VERSION = 0

TopicPartition = tuple[str, int]


def format_checkpoint(entries: dict[TopicPartition, int]) -> bytes:
    lines = [str(VERSION), str(len(entries))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())]
    return ("\n".join(lines) + "\n").encode("utf-8")


def parse_checkpoint(data: bytes, *, source: str = "checkpoint") -> dict[TopicPartition, int]:
    text = data.decode("utf-8", errors="replace")
    if not text.strip():
        return {}
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def bad(reason: str, line: int) -> CorruptRecordError:
        return CorruptRecordError(f"malformed checkpoint: {reason}", source=f"{source} line {line}")

    if lines[0].strip() != str(VERSION):
        raise bad(f"unrecognised version {lines[0]!r}", 1)
    try:
        count = int(lines[1])
    except (IndexError, ValueError):
        raise bad("missing or bad entry count", 2) from None
    if len(lines) - 2 != count:
        raise bad(f"{count} entries declared, {len(lines) - 2} present", 2)
    entries: dict[TopicPartition, int] = {}
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split(" ")
        if len(parts) != 3:
            raise bad(f"expected '<topic> <partition> <offset>', got {line!r}", number)
        try:
            entries[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise bad(f"non-numeric partition/offset in {line!r}", number) from None
    return entries


def read_checkpoint(path: str | os.PathLike) -> dict[TopicPartition, int]:
    """Entries of a checkpoint file; {} when it does not exist."""
    try:
        data = read_small(path)
    except FileNotFoundError:
        return {}
    return parse_checkpoint(data, source=str(path))


def write_checkpoint(path: Path, entries: dict[TopicPartition, int], *, sync_dir: bool = True,
                     deferrable: bool = True) -> None:
    atomic_write(path, format_checkpoint(entries), sync_dir=sync_dir, deferrable=deferrable)


def read_partition_offset(directory: Path, name: str, topic: str, partition: int) -> int | None:
    """The offset recorded for (topic, partition) in `directory/name`, or None."""
    return read_checkpoint(os.path.join(directory, name)).get((topic, partition))


def write_partition_offset(directory: Path, name: str, topic: str, partition: int, offset: int, *,
                           sync_dir: bool = True, deferrable: bool = True) -> None:
    """`deferrable`: see atomic_write."""
    write_checkpoint(Path(directory) / name, {(topic, partition): offset}, sync_dir=sync_dir, deferrable=deferrable)
