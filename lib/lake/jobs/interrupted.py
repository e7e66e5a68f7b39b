"""What a Ctrl-C left committed, read from storage itself (never from the interrupted run's
memory): each watcher notes the state before a job changes anything and, when called after an
interrupt, compares it with what is on disk now.

- ingest: per table, the group's offsets in the Delta log (one commit per table).
- backfill: the table's version (one commit).
- compact: per partition, the cleaner's checkpoint (written after a partition's swap).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Iterable

from topiclake.segments.maintenance import read_cleaner_offset
from topiclake.segments.storage import StorageLayout

from ..table import delta

Watcher = Callable[[], str]


def _offsets(group: str, offsets: dict[tuple[str, int], int | None]) -> str:
    held = [f"{t}-{p}@{o}" for (t, p), o in sorted(offsets.items()) if o is not None]
    return f"group {group} at {', '.join(held)}" if held else f"group {group} has committed nothing yet"


def watch_ingest(pipelines: Iterable, topic_partitions: dict[str, list[int]]) -> Watcher:
    """`pipelines`: ingest.Pipeline (table_uri, group, topics). The files a run wrote and did not
    commit are said too: where they are, and that VACUUM (`topiclake retain --vacuum-hours H`)
    removes them (no reader ever reads them)."""
    pipelines = list(pipelines)
    started = time.time()

    def committed(pipeline) -> dict[tuple[str, int], int | None]:
        tps = [(t, p) for t in pipeline.topics for p in topic_partitions[t]]
        return delta.committed_offsets(delta.load_table(pipeline.table_uri), pipeline.group, tps)

    before = {pl.table_uri: committed(pl) for pl in pipelines}

    def describe() -> str:
        done, not_done = [], []
        for pl in pipelines:
            now = committed(pl)
            name = Path(pl.table_uri).name
            if now != before[pl.table_uri]:
                done.append(f"table {name} ({_offsets(pl.group, now)})")
            else:
                not_done.append(f"table {name} ({_offsets(pl.group, now)})")
        parts = [f"committed {'; '.join(done)}" if done else "nothing was committed"]
        if done and not_done:
            parts.append(f"not committed: {'; '.join(not_done)}")
        elif not_done:
            parts.append("; ".join(not_done))
        said = "; ".join(parts) + ". The next run resumes from the committed offsets"
        left = {pl.table_uri: uncommitted_files(pl.table_uri, since=started) for pl in pipelines}
        left = {uri: n for uri, n in left.items() if n}
        if left:
            where = ", ".join(f"{n} in {uri}" for uri, n in left.items())
            said += (f". Files this run wrote and did not commit are left, never read: {where}; "
                     "`topiclake retain --table NAME --vacuum-hours H` (Delta's VACUUM) removes them once "
                     "H hours old")
        return said
    return describe


def uncommitted_files(table_uri: str, *, since: float) -> int:
    """Parquet files under a local table directory, written at or after `since`, that its
    snapshot does not reference (an interrupted run's). Not counted for a remote table."""
    root = Path(table_uri)
    if "://" in table_uri or not root.is_dir():
        return 0
    table = delta.load_table(table_uri)
    referenced = set(delta.active_files(table).column("path").to_pylist()) if table is not None else set()
    count = 0
    for path in root.rglob("*.parquet"):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("_") or relative in referenced:
            continue
        try:
            if path.stat().st_mtime >= since - 1:
                count += 1
        except OSError:  # vacuumed meanwhile
            continue
    return count


def watch_backfill(table_uri: str, what: str) -> Watcher:
    """`what`: the range, as the message names it (e.g. "orders-0 offsets [10, 20)")."""
    table = delta.load_table(table_uri)
    before = table.version() if table is not None else None

    def describe() -> str:
        table = delta.load_table(table_uri)
        now = table.version() if table is not None else None
        name = Path(table_uri).name
        if now != before:
            return f"the backfill of {what} was committed (table {name} version {now})"
        return f"nothing was committed: table {name} stays at version {before}; run the backfill again"
    return describe


def watch_compaction(root, partitions: Iterable[tuple[str, int]]) -> Watcher:
    """`root`: a directory (cleaner checkpoint files) or an object-store root (the checkpoint in
    each partition's newest manifest)."""
    partitions = list(partitions)
    if isinstance(root, Path):
        layout = StorageLayout(root)

        def checkpoint(topic: str, p: int) -> int | None:
            directory = layout.log_dir(topic, p)
            return read_cleaner_offset(directory) if directory.is_dir() else None
    else:
        from topiclake.objectlog.keys import PartitionKeys
        from topiclake.objectlog.manifest import load_newest
        from topiclake.store.objects import ObjectStore

        store = ObjectStore(root)

        def checkpoint(topic: str, p: int) -> int | None:
            return load_newest(store, PartitionKeys(topic, p)).cleaner_offset

    def checkpoints() -> dict[tuple[str, int], int | None]:
        return {(topic, p): checkpoint(topic, p) for topic, p in partitions}

    before = checkpoints()

    def describe() -> str:
        now = checkpoints()
        done = [f"{t}-{p}" for (t, p) in partitions if now[(t, p)] != before[(t, p)]]
        rest = [f"{t}-{p}" for (t, p) in partitions if now[(t, p)] == before[(t, p)]]
        said = f"compacted {', '.join(done)}" if done else "no partition was compacted"
        if done and rest:
            said += f"; not compacted: {', '.join(rest)}"
        return said
    return describe
