"""A crash inside a clean stop (issue 33 point 2). The stop closes every log without fsyncs, syncs
the root's file system once, renames each log's new files (producer snapshot, recovery-point
checkpoint, clean-shutdown marker) into place, and syncs once more (broker/log_close). A real
broker process killed (SIGKILL) at either sync loses nothing a real producer had acknowledged,
and a log is marked clean only when the kill came after the first sync: no marker exists before
every log's data is durable. The temp files a kill left are removed at the next open once
STALE_TEMP_SECONDS old (a live writer's are younger)."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from topiclake.segments import filenames
from topiclake.segments.atomic import STALE_TEMP_SECONDS
from topiclake.segments.checkpoints import RECOVERY_POINT_CHECKPOINT, read_partition_offset
from topiclake.segments.storage import StorageLayout
from tests.support.broker_process import BrokerProcess
from tests.support.clients import produce, read_all
from tests.support.topics import create_topic
from tests.support.waits import wait_for

pytestmark = pytest.mark.slow

PARTITIONS = 60
PER_PARTITION = 5
OPENED = re.compile(r"opened (\d+) partitions in [\d.]+ s, (\d+) of them recovered")


@pytest.mark.parametrize("kill_at_sync", [1, 2])
def test_a_broker_killed_in_its_clean_stop_loses_nothing_and_marks_only_synced_logs(tmp_path, kill_at_sync):
    data = tmp_path / "data"
    broker = BrokerProcess(data, launcher=("-m", "tests.support.stop_faults", str(kill_at_sync))).start()
    try:
        topic = create_topic(broker.bootstrap, PARTITIONS)
        produce(broker.bootstrap, topic, PARTITIONS, PER_PARTITION)  # every record acknowledged
        assert broker.stop() == -signal.SIGKILL, broker.log()  # killed at the sync, not exited
    finally:
        broker.kill()

    layout = StorageLayout(data)
    aged = time.time() - STALE_TEMP_SECONDS - 1
    for p in range(PARTITIONS):
        directory = layout.log_dir(topic, p)
        temps = [name for name in os.listdir(directory) if name.endswith(".tmp")]
        marked = (directory / filenames.CLEAN_SHUTDOWN_FILE).exists()
        checkpointed = read_partition_offset(directory, RECOVERY_POINT_CHECKPOINT, topic, p)
        if kill_at_sync == 1:  # every log closed, its new files still in temp files
            assert not marked, f"{directory}: a marker before the first sync"
            assert len(temps) == 3 and checkpointed == 0, (directory, temps, checkpointed)
            if p % 2 == 0:  # as if the restart came a minute later; the odd ones' stay young
                for name in temps:
                    os.utime(directory / name, (aged, aged))
        else:  # synced, then renamed into place, the markers last
            assert marked and temps == [] and checkpointed == PER_PARTITION, (directory, temps, checkpointed)

    again = BrokerProcess(data).start()
    try:
        opened = wait_for(lambda: OPENED.findall(again.log()), timeout=60, what="the start's open of every log",
                          detail=again.log)
        assert opened[-1] == (str(PARTITIONS), str(PARTITIONS if kill_at_sync == 1 else 0)), opened
        values = read_all(again.bootstrap, topic, PARTITIONS, "read_uncommitted", PARTITIONS * PER_PARTITION)
        assert sorted(values) == sorted(f"{p}:{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION))
        for p in range(PARTITIONS):
            temps = [name for name in os.listdir(layout.log_dir(topic, p)) if name.endswith(".tmp")]
            kept = 3 if kill_at_sync == 1 and p % 2 == 1 else 0
            assert len(temps) == kept, (p, temps)
    finally:
        assert again.stop() == 0, again.log()


def test_a_kill_9_after_a_clean_start_recovers_every_log_and_loses_nothing(tmp_path):
    """A start after a clean stop removes each log's marker as it opens it, found in the load's
    own listing of the directory (not looked up again), durably before the log takes an append:
    a kill -9 after acknowledged produces has the next start recover every log, nothing lost."""
    data = tmp_path / "data"
    layout = StorageLayout(data)
    broker = BrokerProcess(data).start()
    try:
        topic = create_topic(broker.bootstrap, PARTITIONS)
        produce(broker.bootstrap, topic, PARTITIONS, PER_PARTITION)
        assert broker.stop() == 0, broker.log()  # every log marked clean
        broker.start()
        wait_for(lambda: len(OPENED.findall(broker.log())) == 2, timeout=60, what="the clean start's open of every log",
                 detail=broker.log)  # (the first start's line: no partition yet)
        assert OPENED.findall(broker.log())[-1] == (str(PARTITIONS), "0"), broker.log()
        marked = [p for p in range(PARTITIONS) if (layout.log_dir(topic, p) / filenames.CLEAN_SHUTDOWN_FILE).exists()]
        assert not marked, f"open logs still marked clean: {marked[:10]}"
        produce(broker.bootstrap, topic, PARTITIONS, PER_PARTITION, start=PER_PARTITION)  # acknowledged
        broker.kill()
    finally:
        broker.kill()

    again = BrokerProcess(data).start()
    try:
        opened = wait_for(lambda: OPENED.findall(again.log()), timeout=60, what="the start's open of every log",
                          detail=again.log)
        assert opened[-1] == (str(PARTITIONS), str(PARTITIONS)), opened  # every log recovered
        values = read_all(again.bootstrap, topic, PARTITIONS, "read_uncommitted", 2 * PARTITIONS * PER_PARTITION)
        assert sorted(values) == sorted(f"{p}:{i}".encode() for p in range(PARTITIONS) for i in range(2 * PER_PARTITION))
    finally:
        assert again.stop() == 0, again.log()
