"""read_committed over a bucket's closed segments, planned (log/bucket.py) and decoded by the
executors' read_task on the real versitygw, for the cases a live broker does not make on demand: a
segment sealed before `.txnindex` objects (scanned), a manifest end without a producer snapshot
object (refused), and a transaction begun in a closed segment whose ABORT marker is in the tail."""

from __future__ import annotations

import pytest

from tests.support.bucket_log import BucketPartitionWriter, create_topic, deadline
from topiclake.lake.errors import LakeError
from topiclake.lake.log.decode import read_task
from topiclake.lake.log.offsets import EARLIEST, LATEST, OffsetSpec
from topiclake.lake.log.roots import BucketLog
from topiclake.lake.log.scan import AbortedRange
from topiclake.objectlog.flush import flush
from topiclake.objectlog.manifest import load_newest
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.producer_snapshot import ProducerSnapshotEntry, encode_snapshot
from topiclake.store.objects import ObjectStore

TOPIC = "orders"
NOW_MS = 1_800_000_000_000
PRODUCER = dict(producer_id=7, producer_epoch=0)


def test_a_transaction_from_a_closed_segment_holds_the_lso_until_its_marker_then_its_records_go(s3_root):
    root = s3_root.root
    store = ObjectStore(root)
    create_topic(store, TOPIC, 1)
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()

    def append(data: bytes, count: int) -> None:
        flush(writer.fence, writer.next_offset, writer.epoch, data, deadline=deadline())
        writer.next_offset += count

    def snapshot_at_end(open_first: int) -> None:
        """The producer snapshot object a broker's seal writes at the manifest's end."""
        entry = ProducerSnapshotEntry(7, 0, 1, 1, 1, NOW_MS, 0, open_first)
        store.put(writer.keys.snapshot(load_newest(store, writer.keys).end_offset), encode_snapshot([entry]))

    def plan():
        return BucketLog(root).plan(TOPIC, 0, table_uri=root.uri("tables", TOPIC), committed=None,
                                    starting=OffsetSpec(EARLIEST), ending=OffsetSpec(LATEST), target_task_bytes=1,
                                    allow_data_loss=False)

    def read(tasks) -> list[bytes]:
        return [v for task in tasks for v in read_task(task.as_dict())[0]["value"].to_pylist()]

    append(build_batch([Record(0, NOW_MS, None, b"txn-0"), Record(1, NOW_MS, None, b"txn-1")],
                       is_transactional=True, partition_leader_epoch=writer.epoch, **PRODUCER), 2)
    writer.flush(2, tag="v")  # offsets 2-5, no transaction
    writer.seal()  # [0, 6): no .txnindex object (as before seals wrote them), no snapshot at its end
    assert load_newest(store, writer.keys).segments[0].txn_index_key is None

    unknown = plan()
    assert unknown.end_offset == 6 and all(t.unsettled for t in unknown.tasks)
    with pytest.raises(LakeError, match="no producer snapshot object at the manifest's end"):
        read(unknown.tasks)

    snapshot_at_end(0)  # the transaction from offset 0 is open at the manifest's end
    held = plan()
    assert (held.end_offset, held.last_stable_offset, held.log_end_offset, held.tasks) == (0, 0, 6, ())

    append(build_end_txn_marker(offset=6, timestamp=NOW_MS, commit=False, partition_leader_epoch=writer.epoch,
                                **PRODUCER), 1)
    writer.flush(1, tag="w")  # offsets 7-8
    settled = plan()
    assert settled.end_offset == 9 and settled.aborted == (AbortedRange(7, 0, 5),)
    assert not any(t.unsettled for t in settled.tasks)
    assert read(settled.tasks) == [b"v-2", b"v-3", b"v-4", b"v-5", b"w-7", b"w-8"]

    writer.seal()  # the marker sealed too, in a segment with no .txnindex object: scanned on the driver
    snapshot_at_end(-1)
    sealed = plan()
    assert all(t.closed for t in sealed.tasks) and sealed.aborted == (AbortedRange(7, 0, 5),)
    assert read(sealed.tasks) == [b"v-2", b"v-3", b"v-4", b"v-5", b"w-7", b"w-8"]
