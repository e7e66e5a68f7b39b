"""A broker's start (issue 33: an unclean start of 2,000 partitions in <= 5 s): every partition of
a directory root opens, recovered if the broker was killed, in the background once the broker
serves, with no client asking; and the start imports no more of kio's schemas than it uses."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from typing import Any, Iterator

import pytest

from topiclake.broker.api_keys import ApiKey
from topiclake.broker.handlers.registry import HandlerRegistry
from topiclake.segments import filenames
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.storage import StorageLayout
from tests.support.filled_partitions import filled
from tests.support.in_process_broker import InProcessBroker
from tests.support.waits import wait_for

TOPIC = "started"
PARTITIONS = 40


def _written(layout: StorageLayout, *, crash: bool) -> None:
    """PARTITIONS partitions of TOPIC with two idempotent batches each, left as a clean stop or
    a kill -9 leaves them (no flush, no snapshot, no clean-shutdown marker)."""
    async def scenario():
        manager, parts = await filled(layout, TOPIC, PARTITIONS, 2)
        if crash:
            for part in parts:
                part.log.close_handlers()
        else:
            await manager.close()

    asyncio.run(scenario())


@contextlib.contextmanager
def _started_after(layout: StorageLayout, *, crash: bool) -> Iterator[dict[int, Any]]:
    """A broker started on TOPIC's partitions as `_written` left them; yields index -> Partition
    once its background open reached every one (no client asked for any), then stops it."""
    _written(layout, crash=crash)
    broker = InProcessBroker(layout.root).start()

    def opened() -> dict[int, Any]:
        return {part.index: part for part in broker.context.partitions.open_partitions() if part.topic == TOPIC}

    try:
        yield wait_for(lambda: len(opened()) == PARTITIONS and opened(), timeout=30, what="every partition opened",
                       detail=lambda: sorted(opened()))
    finally:
        broker.stop()


def test_a_start_after_a_kill_recovers_every_partition_without_a_request(tmp_path):
    with _started_after(StorageLayout(tmp_path), crash=True) as opened:
        for part in opened.values():
            loaded = part.log.load_result
            assert not loaded.had_clean_shutdown and loaded.recovered == (0,), part
            assert part.log_end_offset == 2, "recovery loses nothing written"
            retry = build_batch([Record(0, 2000, None, b"again", ())], base_offset=0, producer_id=part.index,
                                producer_epoch=0, base_sequence=1)
            assert part.producers.check(read_header(retry)) is not None, "the producer state was rebuilt too"


def test_a_start_after_a_clean_stop_opens_every_partition_and_the_next_stop_marks_them(tmp_path):
    layout = StorageLayout(tmp_path)
    with _started_after(layout, crash=False) as opened:
        for part in opened.values():
            assert part.log.load_result.had_clean_shutdown and part.log.load_result.recovered == (), part
            assert not (part.log.directory / filenames.CLEAN_SHUTDOWN_FILE).exists(), "open: not clean"
    for p in range(PARTITIONS):
        assert (layout.log_dir(TOPIC, p) / filenames.CLEAN_SHUTDOWN_FILE).exists(), p


def test_the_broker_imports_the_schemas_it_uses_not_every_version(tmp_path):
    """Importing every request schema of every version a route serves took ~0.8 s of each start;
    kio's index says which versions exist without importing them."""
    probe = ("import json, sys; import topiclake.broker.server; "
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kio.schema.fetch.v'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stdout)
    assert "kio.schema.fetch.v4.request" not in loaded, loaded
    assert len(loaded) <= 6, loaded


def test_a_route_for_a_version_kio_lacks_is_refused():
    registry = HandlerRegistry()
    with pytest.raises(ValueError, match=r"kio has no schema for api key .* versions \[14, 15\]"):
        registry.route(ApiKey.PRODUCE, (3, 15))(lambda broker, request: None)
    registry.route(ApiKey.PRODUCE, (3, 13))(lambda broker, request: None)
    assert registry.supports(ApiKey.PRODUCE, 13) and not registry.supports(ApiKey.PRODUCE, 14)


def test_a_config_changed_while_partitions_open_reaches_every_one_of_them(tmp_path):
    """AlterConfigs during a start's background open: the opens in flight took the old config,
    and each partition still ends with the new one (apply_config waits for them)."""
    layout = StorageLayout(tmp_path)
    _written(layout, crash=True)

    async def scenario() -> list[int]:
        from topiclake.broker.partitions import PartitionManager

        manager = PartitionManager(layout)
        opening = asyncio.ensure_future(manager.open_all())
        while not manager._opening:  # opens under way with the config as it was (OPEN_THREADS at a time)
            await asyncio.sleep(0)
        meta = manager.registry.alter_config(TOPIC, {"retention.ms": "12345"})
        await manager.apply_config(meta)
        await opening
        parts = [await manager.get(TOPIC, p) for p in range(PARTITIONS)]
        retention = [part.log.config.retention_ms for part in parts] + [part.config.retention_ms for part in parts]
        await manager.close()
        return retention

    assert set(asyncio.run(scenario())) == {12345}


def test_a_partition_asked_for_during_the_background_open_opens_before_those_nobody_asked_for(tmp_path):
    """The background open keeps only OPEN_THREADS opens queued: a client's partition (the last
    one it would reach) opens at once, not behind every other open of the start."""
    layout = StorageLayout(tmp_path)
    _written(layout, crash=True)

    async def scenario() -> int:
        from topiclake.broker.partitions import PartitionManager

        manager = PartitionManager(layout)
        opening = asyncio.ensure_future(manager.open_all(keep_going=True))
        while not manager._opening:
            await asyncio.sleep(0)
        await manager.get(TOPIC, PARTITIONS - 1)
        assert await opening == PARTITIONS
        # its place in the order the opens were served in (not a count taken when this coroutine
        # ran again: the opener threads go on meanwhile, as long as a loaded machine lets them)
        served_as = list(manager._partitions).index((TOPIC, PARTITIONS - 1))
        await manager.close()
        return served_as

    assert asyncio.run(scenario()) < PARTITIONS // 2, "the partition asked for waited behind the others"
