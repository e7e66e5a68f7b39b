"""Object keys of a partition under the root (docs/OBJECT-STORAGE.md, "Layout in the bucket"),
and what an object name found in a listing is.

    log/<topic>-<p>/leader-epochs/<10-digit e>.claim|.start   the fence (as on a file root)
    log/<topic>-<p>/manifest/<20-digit version>.json          a manifest version
    log/<topic>-<p>/<20-digit base>.log|.index|.timeindex     a closed segment
    log/<topic>-<p>/<20-digit end>.snapshot                   producer state at a closed segment's end
    log/<topic>-<p>/<20-digit base>.e<epoch>.log              a flush object of the open segment
    log/<topic>-<p>/<20-digit base>.s<epoch>.log|...          a closed segment whose plain key was taken
    log/<topic>-<p>/<20-digit base>.m<version>.log|...        small closed segments merged (manifest <version>)
    log/<topic>-<p>/<20-digit base>.c<version>-<run>.log|...  closed segments compacted (manifest <version>, run <run>)

Names reuse segments' helpers, so a segment object has exactly the file's name and a flush object
parses as a segment of base <base> by Kafka's offsetFromFileName (the digits before the first dot).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topiclake.segments import filenames
from topiclake.segments.leader_epochs import CLAIM_SUFFIX, EPOCHS_DIR, START_SUFFIX, check_epoch
from topiclake.segments.storage import validate_topic_name

LOGS_PREFIX = "log"
MANIFEST_DIR = "manifest"
_VERSION_DIGITS = 20
_EPOCH_DIGITS = 10  # as segments' leader-epochs/ file names
_FLUSH = re.compile(r"^(\d{20})\.e(\d{1,10})\.log$")
_MANIFEST = re.compile(r"^(\d{20})\.json$")


@dataclass(frozen=True, slots=True)
class PartitionKeys:
    """The keys of one partition's objects, relative to the root."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if int(self.partition) < 0:
            raise ValueError(f"partition {self.partition} of {self.topic!r} is negative")

    @property
    def prefix(self) -> str:
        return f"{LOGS_PREFIX}/{filenames.partition_dir_name(self.topic, int(self.partition))}"

    @property
    def manifest_prefix(self) -> str:
        return f"{self.prefix}/{MANIFEST_DIR}"

    @property
    def epochs_prefix(self) -> str:
        return f"{self.prefix}/{EPOCHS_DIR}"

    def manifest(self, version: int) -> str:
        if version < 0:
            raise ValueError(f"a manifest version is >= 0, not {version}")
        return f"{self.manifest_prefix}/{version:0{_VERSION_DIGITS}d}.json"

    def segment(self, base_offset: int, suffix: str = filenames.LOG_SUFFIX) -> str:
        """A closed segment's object: suffix .log, .index, .timeindex or .txnindex."""
        if suffix not in filenames.SEGMENT_SUFFIXES:
            raise ValueError(f"{suffix!r} is not a segment suffix ({', '.join(filenames.SEGMENT_SUFFIXES)})")
        return f"{self.prefix}/{filenames.offset_to_name(base_offset)}{suffix}"

    def sealed_segment(self, base_offset: int, epoch: int, suffix: str = filenames.LOG_SUFFIX) -> str:
        """`<base>.s<epoch><suffix>`: a closed segment of the sealer of `epoch`, when `<base><suffix>`
        holds a stale sealer's other bytes (its commit lost). Kafka's tools read the digits first."""
        check_epoch(epoch)
        if suffix not in filenames.SEGMENT_SUFFIXES:
            raise ValueError(f"{suffix!r} is not a segment suffix ({', '.join(filenames.SEGMENT_SUFFIXES)})")
        return f"{self.prefix}/{filenames.offset_to_name(base_offset)}.s{epoch}{suffix}"

    def merged_segment(self, base_offset: int, version: int, suffix: str = filenames.LOG_SUFFIX) -> str:
        """`<base>.m<version><suffix>`: closed segments merged into one by the commit of manifest
        `version` (the first segment's plain key is taken by that segment itself)."""
        if version < 0 or suffix not in filenames.SEGMENT_SUFFIXES:
            raise ValueError(f"no merged segment key for version {version} and suffix {suffix!r}")
        return f"{self.prefix}/{filenames.offset_to_name(base_offset)}.m{version}{suffix}"

    def cleaned_segment(self, base_offset: int, version: int, run: str, suffix: str = filenames.LOG_SUFFIX) -> str:
        """`<base>.c<version>-<run><suffix>`: closed segments compacted into one, planned on manifest
        `version` by compaction run `run` (hex). The run keeps a rerun after a kill, whose delete
        horizons differ, off the killed run's objects (garbage until the grace passes)."""
        if version < 0 or suffix not in filenames.SEGMENT_SUFFIXES or not re.fullmatch(r"[0-9a-f]{1,32}", run):
            raise ValueError(f"no cleaned segment key for version {version}, run {run!r} and suffix {suffix!r}")
        return f"{self.prefix}/{filenames.offset_to_name(base_offset)}.c{version}-{run}{suffix}"

    def snapshot(self, end_offset: int) -> str:
        return f"{self.prefix}/{filenames.offset_to_name(end_offset)}{filenames.SNAPSHOT_SUFFIX}"

    def flush(self, base_offset: int, epoch: int) -> str:
        """`<base>.e<epoch>.log`: the epoch in the name keeps two leaders off one key."""
        check_epoch(epoch)
        return f"{self.prefix}/{filenames.offset_to_name(base_offset)}.e{epoch}{filenames.LOG_SUFFIX}"

    def claim(self, epoch: int) -> str:
        check_epoch(epoch)
        return f"{self.epochs_prefix}/{epoch:0{_EPOCH_DIGITS}d}{CLAIM_SUFFIX}"

    def start(self, epoch: int) -> str:
        check_epoch(epoch)
        return f"{self.epochs_prefix}/{epoch:0{_EPOCH_DIGITS}d}{START_SUFFIX}"

    def relative(self, key: str) -> str | None:
        """`key` relative to this partition's prefix; None when it is not under it."""
        head = self.prefix + "/"
        return key[len(head):] if key.startswith(head) else None


@dataclass(frozen=True, slots=True)
class FlushName:
    base_offset: int
    epoch: int


def parse_flush_name(name: str) -> FlushName | None:
    """`00000000000000001234.e7.log` -> FlushName(1234, 7); None for any other name."""
    match = _FLUSH.match(name.rpartition("/")[2])
    return FlushName(int(match.group(1)), int(match.group(2))) if match else None


def parse_manifest_name(name: str) -> int | None:
    """`manifest/00000000000000000003.json` (or the bare name) -> 3; None otherwise."""
    match = _MANIFEST.match(name.rpartition("/")[2])
    return int(match.group(1)) if match else None
