"""Stopping a broker's logs (PartitionManager.close, issue 33): many logs close on helper
threads, each durable before any gets its clean-shutdown marker (one syncfs of the root on
Linux, else fsyncs file by file: both here; a crash inside the stop: tests/integration/
test_stop_crash.py), and the next open of a cleanly stopped log recovers nothing; after a crash
(no close) the next open recovers, losing nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from pathlib import Path
from typing import Callable, Iterator

from topiclake.broker.log_close import close_logs
from topiclake.broker.partitions import PartitionManager
from topiclake.segments import filenames
from topiclake.segments.atomic import (SYNCFS_REPORTS_ERRORS, atomic_write, can_sync_filesystem, deferred_writes,
                                       file_system_type, kernel_version)
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.checkpoints import RECOVERY_POINT_CHECKPOINT, read_partition_offset
from topiclake.segments.storage import StorageLayout

from tests.support.filled_partitions import filled
from topiclake.broker.partition_snapshot import KEEP_SNAPSHOTS, take_snapshot
from topiclake.segments.producer_snapshot import list_snapshots

TOPIC = "many"
PARTITIONS = 200
BATCHES = 3


async def _filled(layout: StorageLayout) -> tuple[PartitionManager, list]:
    """A manager with PARTITIONS open partitions of TOPIC, BATCHES idempotent batches in each."""
    return await filled(layout, TOPIC, PARTITIONS, BATCHES)


def _assert_marked_clean(layout: StorageLayout) -> None:
    """Every log marked, its recovery point at its end, no temp file left behind."""
    for p in range(PARTITIONS):
        directory = layout.log_dir(TOPIC, p)
        assert (directory / filenames.CLEAN_SHUTDOWN_FILE).exists(), directory
        assert read_partition_offset(directory, RECOVERY_POINT_CHECKPOINT, TOPIC, p) == BATCHES
        assert not [name for name in os.listdir(directory) if name.endswith(".tmp")], directory


async def _assert_reopened_clean(layout: StorageLayout) -> None:
    """Every log opens with nothing to recover, its producer state from the close's snapshot."""
    manager, parts = await _reopened(layout)
    try:
        for part in parts:
            loaded = part.log.load_result
            assert loaded.had_clean_shutdown and loaded.recovered == (), part
            assert part.log_end_offset == BATCHES
            assert (part.replay.snapshot_offset, part.replay.batches) == (BATCHES, 0), \
                "the producer state comes from the close's snapshot, nothing replayed"
            assert not (part.log.directory / filenames.CLEAN_SHUTDOWN_FILE).exists(), \
                "an open log is not a cleanly stopped one"
    finally:
        await manager.close()


@contextlib.contextmanager
def _recording_fsyncs() -> Iterator[list[Path]]:
    """The files and directories fsynced (or fdatasynced) meanwhile; the real calls still run."""
    synced: list[Path] = []
    real = os.fsync, os.fdatasync

    def recording(call: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")))
            call(fd)
        return sync
    os.fsync, os.fdatasync = recording(real[0]), recording(real[1])
    try:
        yield synced
    finally:
        os.fsync, os.fdatasync = real


async def _reopened(layout: StorageLayout) -> tuple[PartitionManager, list]:
    manager = PartitionManager(layout)
    await manager.open_many((TOPIC, p) for p in range(PARTITIONS))
    return manager, [await manager.get(TOPIC, p) for p in range(PARTITIONS)]


def test_a_clean_stop_marks_every_log_and_the_next_open_recovers_nothing(tmp_path):
    layout = StorageLayout(tmp_path)
    closing_threads: set[str] = set()

    async def scenario():
        manager, parts = await _filled(layout)
        for part in parts:  # which threads run the closes (the Log's own close, unchanged)
            close = part.log.close

            def recording(*, mark_clean=True, _close=close):
                closing_threads.add(threading.current_thread().name)
                _close(mark_clean=mark_clean)
            part.log.close = recording
        with _recording_fsyncs() as synced:
            await manager.close()
        assert synced == [] or not can_sync_filesystem(manager._root_fd), "one syncfs of the root, no fsync file by file"
        _assert_marked_clean(layout)
        await _assert_reopened_clean(layout)

    asyncio.run(scenario())
    assert len(closing_threads) > 1 and all(name.startswith("topiclake-close") for name in closing_threads)


def test_without_one_sync_of_the_root_each_close_syncs_its_own_files(tmp_path):
    """No root descriptor (as where there is no syncfs, or a log on another file system): each
    close fsyncs as it goes, writing its files in place, and the markers follow every close."""
    layout = StorageLayout(tmp_path)

    async def scenario():
        manager, parts = await _filled(layout)
        with _recording_fsyncs() as synced:
            assert await manager.run_io(close_logs, parts) == PARTITIONS
        assert {path.parent.name for path in synced} >= {f"{TOPIC}-{p}" for p in range(PARTITIONS)}
        _assert_marked_clean(layout)
        await _assert_reopened_clean(layout)

    asyncio.run(scenario())


def test_one_sync_only_where_the_file_system_syncs_all_it_holds(tmp_path):
    """syncfs reaches no FUSE server (but virtiofs) and proc holds no data: a root there fsyncs
    file by file; the kernel must report write-back errors through syncfs (Linux 5.17: a journal's
    too). The file system is statfs(2)'s f_type, and one that cannot be known (an error, a
    descriptor gone, a type not named) means file by file, never an error that would stop the stop."""
    fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not can_sync_filesystem(fd)
    finally:
        os.close(fd)
    assert file_system_type("/proc/self") == "proc"
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert file_system_type(fd) == file_system_type(str(tmp_path))
    finally:
        os.close(fd)
    assert file_system_type(fd) is None and not can_sync_filesystem(fd)  # closed: unknown, no raise
    if can_sync_filesystem():
        assert kernel_version() >= SYNCFS_REPORTS_ERRORS >= (5, 17)


def test_a_clean_stop_keeps_the_newest_snapshots_counting_its_own(tmp_path):
    """The close's snapshot waits for the root's sync in a temp file; the pruning beside it counts
    it all the same: KEEP_SNAPSHOTS remain after the renames, not one more."""
    layout = StorageLayout(tmp_path)

    async def scenario():
        manager, [part] = await filled(layout, TOPIC, 1, 4)
        await manager.run_io(lambda: [take_snapshot(part, offset) for offset in (1, 2, 3)])
        await manager.close()
        return sorted(list_snapshots(layout.log_dir(TOPIC, 0)))

    assert asyncio.run(scenario()) == list(range(5 - KEEP_SNAPSHOTS, 5))  # the close's own at 4


def test_deferred_writes_nest(tmp_path):
    """An inner block's end gives the outer one its deferral back (it does not turn deferring off)."""
    with deferred_writes() as outer:
        with deferred_writes() as inner:
            atomic_write(tmp_path / "inner", b"1")
        atomic_write(tmp_path / "outer", b"2")
    assert [path.name for _temp, path in inner] == ["inner"]
    assert [path.name for _temp, path in outer] == ["outer"]
    assert not (tmp_path / "outer").exists()  # left in its temp file for the caller to rename


def test_after_a_crash_the_next_open_recovers_and_loses_nothing(tmp_path):
    layout = StorageLayout(tmp_path)

    async def scenario():
        manager, parts = await _filled(layout)
        for part in parts:  # what a kill -9 leaves: no flush, no snapshot, no marker
            part.log.close_handlers()
        manager, parts = await _reopened(layout)
        try:
            for part in parts:
                loaded = part.log.load_result
                assert not loaded.had_clean_shutdown and loaded.recovered == (0,), part
                assert part.log_end_offset == BATCHES
                assert part.producers.check(read_header(build_batch(
                    [Record(0, 2000, None, b"again", ())], base_offset=0, producer_id=part.index,
                    producer_epoch=0, base_sequence=0))) is not None, "the producer state was rebuilt too"
        finally:
            await manager.close()

    asyncio.run(scenario())
