"""What the console reads from the storage root itself, without the broker: the cluster id, the
brokers' registrations (endpoints, lease: topiclake.client.registrations) and the partitions'
sizes on disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

from topiclake.segments.storage import StorageLayout

LOG_SUFFIX = ".log"


def cluster_id(layout: StorageLayout) -> str | None:
    try:
        return json.loads(layout.cluster_meta_file.read_text())["cluster_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def partition_bytes(layout: StorageLayout, topic: str, partition: int) -> int:
    """Bytes of the partition's segment files (.log) on disk."""
    try:
        directory = layout.log_dir(topic, partition)
        with os.scandir(directory) as entries:
            return sum(e.stat().st_size for e in entries if e.name.endswith(LOG_SUFFIX) and e.is_file())
    except (OSError, ValueError):
        return 0


def topic_bytes(layout: StorageLayout, topic: str, partitions: list[int]) -> int:
    return sum(partition_bytes(layout, topic, p) for p in partitions)


def human_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def safe_join(base: Path, relative: str) -> Path | None:
    """`base/relative` when it stays inside `base` (static files), else None."""
    target = (base / relative).resolve()
    return target if target.is_relative_to(base.resolve()) else None
