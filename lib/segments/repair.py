"""Repairing a damaged partition the way Kafka's recovery does: truncate at the damage.

Kafka has no way to skip a bad range in the middle of a log: offsets are dense and the log start
offset only moves the beginning. When its LogLoader recovers a segment it cuts the file at the
first batch that is not whole and valid and deletes every later segment (the data after the cut
is lost; the next append reuses its offsets). `truncate_at` makes the broker's own loader do that
from the damaged segment on: it rewinds the recovery point to that segment and removes the
clean-shutdown marker, so the loader recovers it, then closes the log cleanly (checkpoints, the
marker). The caller must own the storage root (ownership.acquire): never while a broker runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from . import filenames
from .checkpoints import RECOVERY_POINT_CHECKPOINT, write_partition_offset
from .config import LogConfig
from .leader_epochs import EPOCHS_DIR
from .log import Log
from .errors import TopiclakeError


class RepairRefusedError(TopiclakeError):
    """A repair that would not be safe (cluster mode: the leaders decide where the log ends)."""


@dataclass(frozen=True, slots=True)
class Truncation:
    log_end: int  # the next offset after the repair (appends continue here)
    truncated_bytes: int
    deleted_segments: tuple[int, ...]  # base offsets of the later segments removed


def truncate_at(directory: str | Path, config: LogConfig, *, topic: str, partition: int,
                segment_base: int) -> Truncation:
    """Recover the partition from the segment based at `segment_base` on, as Kafka's loader does
    after a crash: the damaged batch and everything after it is removed."""
    directory = Path(directory)
    if (directory / EPOCHS_DIR).exists():
        raise RepairRefusedError(f"{directory} is a cluster partition (it has {EPOCHS_DIR}/): its leader's "
                                 "recovery decides where its log ends; repair it by restarting its leader")
    write_partition_offset(directory, RECOVERY_POINT_CHECKPOINT, topic, partition, segment_base)
    (directory / filenames.CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    log = Log.open(directory, config, topic=topic, partition=partition)
    try:
        loaded = log.load_result
        return Truncation(loaded.log_end_offset, loaded.truncated_bytes, loaded.deleted)
    finally:
        log.close()
