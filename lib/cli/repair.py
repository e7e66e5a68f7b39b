"""`topiclake repair-log`: truncate a damaged partition at the damage, as Kafka's recovery does.

The damage is what stops every reader (topiclake.lake.log.damage: a bad batch length, a file cut
short in its middle, a wrong magic). The repair is Kafka's (topiclake.segments.repair): the damaged
segment is cut at its first bad batch and every later segment is deleted; the offsets from the
damage on are lost and the next append reuses them. --dry-run says what would go and changes
nothing. The repair takes the storage root's lock, so it refuses while a broker owns the root
(no two writers), and a broker cannot start during it. docs/LAKE.md "A corrupt log".
"""

from __future__ import annotations

import os

import typer

from .output import DEBUG_OPTION, fail, reported_errors
from .roots import directory_root


def register(app: typer.Typer) -> None:
    app.command("repair-log")(repair_log)


def repair_log(
    topic: str = typer.Option(..., "--topic", help="Topic of the damaged partition."),
    partition: int = typer.Option(..., "--partition", help="The damaged partition."),
    data: str = typer.Option(..., "--data", help="Storage root (the broker's --data)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would be truncated; change nothing."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Truncate a partition at its damaged batch (Kafka's recovery); the offsets after it are lost."""
    from topiclake.lake.log.damage import find_damage
    from topiclake.lake.log.source import list_partition
    from topiclake.segments import ownership
    from topiclake.segments.repair import record_repair, truncate_at
    from topiclake.segments.storage import StorageLayout, TopicRegistry

    root = directory_root(data)
    with reported_errors(debug):
        layout = StorageLayout(root)
        meta = TopicRegistry(layout).get(topic)
        if not 0 <= partition < meta.partitions:
            fail(f"topic {topic!r} has partitions 0..{meta.partitions - 1}, not {partition}", code=2)
        files = list_partition(layout, topic, partition)
        damage = find_damage(files)
        name = f"{topic}-{partition}"
        if damage is None:
            print(f"{name}: no damage found (every batch from offset {files.log_start_offset} reads whole); "
                  "nothing to repair")
            return
        segment = next(s for s in files.segments if s.path == damage.error.source)
        later = [s for s in files.segments if s.base_offset > segment.base_offset]
        cut = os.stat(segment.path).st_size - (damage.error.position or 0)
        what = (f"cut {os.path.basename(segment.path)} at position {damage.error.position} ({cut} bytes)"
                + (f" and delete {len(later)} later segment(s) (from offset {later[0].base_offset})" if later else ""))
        lost = f"offsets [{damage.offset}, {damage.log_end})"
        if dry_run:
            print(f"would truncate {name} at offset {damage.offset}: {what}; {lost} would be lost and the next "
                  f"append would reuse offset {damage.offset} (damage: {damage.error.reason})")
            return
        lock = ownership.acquire(root, tool="repair-log")  # StorageRootInUseError while a broker runs
        try:
            done = truncate_at(files.directory, meta.log_config, topic=topic, partition=partition,
                               segment_base=segment.base_offset)
            record_repair(files.directory, offset=done.log_end, lost_end=damage.log_end, file=segment.path,
                          position=damage.error.position, reason=damage.error.reason)
        finally:
            lock.release()
        print(f"truncated {name} at offset {damage.offset}: {what}; {lost} are lost ({done.truncated_bytes} bytes "
              f"cut, {len(done.deleted_segments)} segment(s) deleted); the log now ends at {done.log_end}")
