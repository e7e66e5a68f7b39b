"""The seal_ms clock of a bucket partition's tail (`PartitionTail`), on real threads against
versitygw: a flush that lands while a seal uploads keeps its own time, so the next seal is due
seal_ms after that flush, not seal_ms after the slow seal ended (restarting the clock at the
seal's end made a seal up to seal_ms late)."""

from __future__ import annotations

import threading
import time

from topiclake.broker.bucket.settings import BucketSettings
from topiclake.broker.bucket.takeover import take_over
from topiclake.broker.partition import Partition
from topiclake.objectlog.keys import PartitionKeys
from topiclake.segments.batch import Record, build_batch, read_header
from topiclake.segments.config import LogConfig
from topiclake.store.objects import ObjectStore

SEAL_MS = 1000
SEAL_UPLOAD_S = 1.5  # how long the seal's upload goes on after the flush beside it: above seal_ms


def _batch(value: bytes) -> bytes:
    return build_batch([Record(0, int(time.time() * 1000), None, value, ())], base_offset=0)


def _deadline() -> float:
    return time.monotonic() + 10


def test_a_flush_during_a_slow_seal_keeps_its_place_on_the_seal_clock(s3_root, monkeypatch, tmp_path):
    for name, value in s3_root.env.items():
        monkeypatch.setenv(name, value)
    store, config = ObjectStore(s3_root.root), LogConfig()
    settings = BucketSettings(root=s3_root.root, cache_dir=tmp_path, seal_ms=SEAL_MS)

    def make_partition(log_, epoch: int) -> Partition:
        part = Partition("clock", 0, log_, config)
        part.bucket_epoch = part.leader_epoch = epoch
        part.load_state()
        return part

    part = take_over(store, PartitionKeys("clock", 0), settings, tmp_path / "clock-0", config,
                     owner={"broker_id": 0}, make_partition=make_partition)
    tail = part.tail
    writer = threading.Lock()  # the broker's one writer thread: appends and captures never overlap

    def append(value: bytes) -> None:
        with writer:
            data = _batch(value)
            part.append_batch(data, read_header(data), confirm=False)

    append(b"sealed")
    assert tail.flush(_deadline())
    flushed_during_seal: list[float] = []

    def on_writer_thread(fn):
        with writer:
            result = fn()
        if result is not None and not flushed_during_seal:
            # The seal captured its end: a produce arrives, the flush tick (another thread)
            # flushes it, and the seal's upload goes on for longer than seal_ms.
            append(b"after the capture")
            flusher = threading.Thread(target=tail.flush, args=(_deadline(),))
            flusher.start()
            flusher.join(10)
            flushed_during_seal.append(time.monotonic())
            time.sleep(SEAL_UPLOAD_S)
        return result

    try:
        sealed = tail.seal(_deadline(), on_writer_thread)
        assert sealed is not None and sealed.end_offset == 1
        assert flushed_during_seal and tail.flushed_end == 2
        # The clock runs from the flush beside the seal: the next seal is due already.
        assert tail.first_unsealed is not None and tail.first_unsealed <= flushed_during_seal[0]
        assert tail.seal_due(time.monotonic()), "the flush during the seal restarted the seal_ms clock"
        assert tail.seal(_deadline(), on_writer_thread).end_offset == 2
        assert tail.first_unsealed is None and not tail.seal_due(time.monotonic() + 3600)
    finally:
        part.log.close_handlers()
