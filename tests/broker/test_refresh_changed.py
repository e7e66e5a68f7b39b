"""The broker's periodic refresh (PartitionManager.refresh_all) looks only at the partitions whose
log directory changed since it last looked (a maintenance job renames files there), and picks up
every job's change: a directory whose mtime moved is refreshed, and one changed less than
REFRESH_SETTLED_NS before it was looked at is looked at again (a later change may keep its mtime)."""

from __future__ import annotations

import asyncio
import os
import time

from tests.support.filled_partitions import filled
from topiclake.broker.partitions import REFRESH_SETTLED_NS
from topiclake.segments.maintenance import delete_segments
from topiclake.segments.storage import StorageLayout


def _retire_first_segment(part, *, keep_mtime: bool) -> None:
    """Retention's job on the partition's first segment (offsets 0-1); `keep_mtime`: the directory's
    mtime set back as it was, as if the change fell in the tick of the mtime seen."""
    directory = part.log.directory
    before = os.stat(directory)
    delete_segments(directory, [0], 2)
    if keep_mtime:
        os.utime(directory, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_refresh_round_looks_only_at_changed_directories_and_misses_no_job(tmp_path):
    async def scenario() -> None:
        manager, parts = await filled(StorageLayout(tmp_path), "t", 3, 2)
        await manager.run_io(lambda: [part.log.roll() for part in parts])  # offsets 0-1 closed
        time.sleep(REFRESH_SETTLED_NS / 1e9 + 0.1)
        await manager.refresh_all()  # every directory looked at, settled
        settled, touched, fresh = parts

        # Unchanged as far as its directory says: not looked at, so the job's change is not seen yet.
        _retire_first_segment(settled, keep_mtime=True)
        await manager.refresh_all()
        assert settled.log.log_start_offset == 0
        assert [s.base_offset for s in settled.log.segments()] == [0, 2]
        # The same once the directory moved: picked up.
        os.utime(settled.log.directory)
        await manager.refresh_all()
        assert settled.log.log_start_offset == 2
        assert [s.base_offset for s in settled.log.segments()] == [2]

        # A job's change moves the directory's mtime: picked up in the next round.
        _retire_first_segment(touched, keep_mtime=False)
        await manager.refresh_all()
        assert touched.log.log_start_offset == 2

        # Looked at right after a change (within the settle time): looked at again next round, even
        # when a job's later change leaves the mtime as it was.
        os.utime(fresh.log.directory)
        await manager.refresh_all()
        _retire_first_segment(fresh, keep_mtime=True)
        await manager.refresh_all()
        assert fresh.log.log_start_offset == 2
        await manager.close()

    asyncio.run(scenario())
