"""The root's own small files (topic files, configs, registrations, producer ids) are written by
`atomic_write` through a temp file; a crash between the write and the rename leaves it. A broker
starting on the root removes those a minute old (no live writer's) and leaves the young ones and
every other file. (A log directory's are removed by that log's open: tests/integration/test_stop_crash.py.)"""

from __future__ import annotations

import os
import time

from topiclake.segments.atomic import STALE_TEMP_SECONDS
from topiclake.segments.storage import StorageLayout
from tests.support.in_process_broker import InProcessBroker


def test_a_starting_broker_removes_the_root_level_temp_files_a_crash_left(tmp_path):
    layout = StorageLayout(tmp_path / "data")
    broker = InProcessBroker(layout.root).start()
    try:
        assert broker.create_topic("kept").error_code == 0
    finally:
        broker.stop()

    aged = time.time() - STALE_TEMP_SECONDS - 1
    planted = {}  # path -> whether a start must remove it
    for directory, name in [(layout.topics_dir, "kept.json"), (layout.cluster_dir, "producer_ids.json"),
                            (layout.brokers_dir, "0.json"), (layout.cluster_dir, "broker-configs.json"),
                            (layout.producer_id_blocks_dir, "1000"), (layout.root, "recovery-point-offset-checkpoint")]:
        directory.mkdir(parents=True, exist_ok=True)
        old, young = directory / f".{name}.k3j2x_a1.tmp", directory / f".{name}.z9q8w_b2.tmp"
        for path in (old, young):
            path.write_bytes(b'{"half": ')
        os.utime(old, (aged, aged))
        planted |= {old: True, young: False}
    not_a_temp = layout.topics_dir / ".lock"  # the registry's flock file: a dot file, not a temp file
    not_a_temp.touch()
    os.utime(not_a_temp, (aged, aged))

    broker = InProcessBroker(layout.root).start()
    try:
        left = {path: path.exists() for path in planted}
        assert [p for p, removed in planted.items() if left[p] == removed] == [], left
        assert not_a_temp.exists()
        assert broker.create_topic("another").error_code == 0  # the registry works on
        assert sorted(p.stem for p in layout.topics_dir.glob("*.json")) == ["another", "kept"]
    finally:
        broker.stop()
