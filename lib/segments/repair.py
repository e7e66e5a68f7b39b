"""Repairing a damaged partition the way Kafka's recovery does: truncate at the damage.

Kafka has no way to skip a bad range in the middle of a log: offsets are dense and the log start
offset only moves the beginning. When its LogLoader recovers a segment it cuts the file at the
first batch that is not whole and valid and deletes every later segment (the data after the cut
is lost; the next append reuses its offsets). `truncate_at` makes the broker's own loader do that
from the damaged segment on: it rewinds the recovery point to that segment and removes the
clean-shutdown marker, so the loader recovers it, then closes the log cleanly (checkpoints, the
marker). The caller must own the storage root (ownership.acquire): never while a broker runs.

Each repair is recorded in the partition directory (`REPAIRS_FILE`, one JSON line per repair: when,
where the log was cut and which offsets were lost), so the ingest that next reads from the cut can
say what the table will never hold (lake/log/plan.py). Kafka's loader ignores the file.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import filenames
from .checkpoints import RECOVERY_POINT_CHECKPOINT, write_partition_offset
from .config import LogConfig
from .leader_epochs import EPOCHS_DIR
from .log import Log
from .errors import TopiclakeError


REPAIRS_FILE = "topiclake-repairs.jsonl"


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


@dataclass(frozen=True, slots=True)
class RepairRecord:
    time_ms: int
    offset: int  # where the log was cut (the next append reuses it)
    lost_end: int  # the offsets [offset, lost_end) of the damaged log were lost
    file: str
    position: int | None
    reason: str


def record_repair(directory: str | Path, *, offset: int, lost_end: int, file: str, position: int | None,
                  reason: str) -> RepairRecord:
    record = RepairRecord(int(time.time() * 1000), offset, lost_end, os.path.basename(file), position, reason)
    with open(Path(directory) / REPAIRS_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(asdict(record)) + "\n")
        f.flush()
        os.fsync(f.fileno())
    return record


def read_repairs(directory: str | Path) -> list[RepairRecord]:
    """The partition's repairs, oldest first ([] when it was never repaired)."""
    try:
        lines = (Path(directory) / REPAIRS_FILE).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [RepairRecord(**json.loads(line)) for line in lines if line.strip()]
