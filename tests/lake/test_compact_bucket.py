"""`topiclake compact` on an object-store root (real versitygw): Kafka's cleaner rules over the
closed segments of a partition in the bucket, the cleaned segments written as new objects and
swapped in by ONE manifest commit per partition that a leader's seal meanwhile does not undo."""

from __future__ import annotations

from topiclake.lake.log.decode import read_task
from topiclake.lake.log.offsets import EARLIEST, LATEST, OffsetSpec
from topiclake.lake.log.roots import BucketLog
from topiclake.lake.runs.bucket_merge import merge_bucket
from topiclake.lake.runs.bucket_compaction import CleanBucketPartition, commit_cleaned, plan_bucket_partition
from topiclake.lake.runs.compaction import CompactOptions, compact, format_summary
from topiclake.objectlog.aborted import known_aborted
from topiclake.objectlog.flush import flush
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.manifest import commit, load_newest
from topiclake.objectlog.reader import read_log
from topiclake.segments.batch import Record, build_batch
from topiclake.segments.config import LogConfig
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.storage import TopicMeta
from topiclake.store.objects import ObjectStore

from tests.support.bucket_batches import values
from tests.support.bucket_log import BucketPartitionWriter, create_topic, deadline

TOPIC = "kv"
KEYS = PartitionKeys(TOPIC, 0)
COMPACTED = {"cleanup.policy": "compact"}
NOW_MS = 1_800_000_000_000


def three_rounds_of_four_keys(store: ObjectStore) -> BucketPartitionWriter:
    """Closed segments [0, 4), [4, 8), [8, 12): keys k0-k3 written in each; a tail 12 (k0)."""
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()
    for round_ in range(3):
        writer.flush_changes([(f"k{i}".encode(), f"r{round_}-k{i}".encode()) for i in range(4)])
        writer.seal()
    writer.flush_changes([(b"k0", b"tail-k0")])
    return writer


def test_duplicates_reduce_to_each_keys_last_record_in_one_commit_and_a_rerun_changes_nothing(spark, s3_root):
    store = ObjectStore(s3_root.root)
    create_topic(store, TOPIC, 1, COMPACTED)
    create_topic(store, "plain", 1)  # not compacted: counted among the skipped
    writer = three_rounds_of_four_keys(store)
    before = load_newest(store, KEYS)

    result = compact(spark, CompactOptions(root=s3_root.root, now_ms=NOW_MS))
    summary = format_summary(result)
    assert not result.errors, summary
    assert "kv-0: 3 -> 1 segments" in summary and "4 dropped" not in summary and "8 dropped" in summary, summary
    assert "skipped 1 partitions: 1 in topics without cleanup.policy=compact" in summary, summary
    after = load_newest(store, KEYS)
    assert after.version == before.version + 1 and after.leader_epoch == before.leader_epoch
    assert after.end_offset == before.end_offset == 12 and after.cleaner_offset == 12
    [cleaned] = after.segments
    assert (cleaned.base_offset, cleaned.end_offset) == (0, 12)
    assert cleaned.key.endswith(f"00000000000000000000.c{before.version}-{result.run_id}.log")
    assert store.head(cleaned.index_key) is not None and store.head(cleaned.time_index_key) is not None
    expected = [(8 + i, f"r2-k{i}".encode()) for i in range(4)] + [(12, b"tail-k0")]
    assert values(read_log(store, KEYS)) == expected
    assert all(store.head(e.key) is not None for e in before.segments)  # garbage only after the grace
    assert any(info.key.startswith("metrics/compact-") for info in store.list("metrics"))  # the run's record

    again = compact(spark, CompactOptions(root=s3_root.root, now_ms=NOW_MS))
    assert not again.cleaned and not again.errors and load_newest(store, KEYS) == after
    assert "with nothing to clean" in format_summary(again)

    writer.seal()  # the leader seals on top of the compacted manifest: the checkpoint stays
    sealed = load_newest(store, KEYS)
    assert sealed.segments[0] == cleaned and sealed.cleaner_offset == 12 and sealed.end_offset == 13


def test_tombstones_stay_until_delete_retention_ms_has_passed(spark, s3_root):
    store = ObjectStore(s3_root.root)
    create_topic(store, TOPIC, 1, {**COMPACTED, "delete.retention.ms": "60000"})
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()
    writer.flush_changes([(b"a", b"1"), (b"b", b"1"), (b"a", None), (b"c", b"1")])
    writer.seal()

    def run(now_ms: int) -> list:
        result = compact(spark, CompactOptions(root=s3_root.root, topics=(TOPIC,), force=True, now_ms=now_ms))
        assert len(result.cleaned) == 1, format_summary(result)
        return values(read_log(store, KEYS))

    assert run(NOW_MS) == [(1, b"1"), (2, None), (3, b"1")]  # the tombstone gets its horizon
    writer.flush_changes([(b"c", b"2"), (b"d", b"1")])
    writer.seal()
    assert run(NOW_MS + 30_000) == [(1, b"1"), (2, None), (4, b"2"), (5, b"1")]
    writer.flush_changes([(b"d", b"2")])
    writer.seal()
    assert run(NOW_MS + 61_000) == [(1, b"1"), (4, b"2"), (6, b"2")]  # past the horizon: gone


def test_a_seal_before_the_commit_is_kept_and_a_replaced_segment_gone_stops_the_commit(s3_root):
    store = ObjectStore(s3_root.root)
    create_topic(store, TOPIC, 1, COMPACTED)
    writer = three_rounds_of_four_keys(store)
    config = LogConfig.from_properties(COMPACTED)

    def clean(force: bool = False):
        part, spec = plan_bucket_partition(store, TOPIC, 0, config, now_ms=NOW_MS, force=force, run="0a1b")
        assert spec is not None, part.skipped
        return part, spec, CleanBucketPartition({(TOPIC, 0): spec})((TOPIC, 0))

    part, spec, rows = clean()
    writer.seal()  # the leader's seal takes the version the compaction planned on + 1
    raced = load_newest(store, KEYS)
    commit_cleaned(store, part, spec, rows)
    assert part.error is None and part.segments_before == 3
    after = load_newest(store, KEYS)
    assert after.version == raced.version + 1 and after.segments[1:] == raced.segments[3:]
    assert values(read_log(store, KEYS)) == [(8 + i, f"r2-k{i}".encode()) for i in range(4)] + [(12, b"tail-k0")]

    writer.flush_changes([(b"k1", b"late-k1")])
    writer.seal()
    part, spec, rows = clean(force=True)  # below min.cleanable.dirty.ratio now
    newest = load_newest(store, KEYS)  # retention drops the first segment meanwhile
    commit(store, KEYS, newest, newest.successor(leader_epoch=newest.leader_epoch, segments=newest.segments[1:],
                                                 log_start_offset=newest.segments[1].base_offset))
    dropped = load_newest(store, KEYS)
    commit_cleaned(store, part, spec, rows)
    assert part.error is not None and "the manifest changed under it" in part.error
    assert load_newest(store, KEYS) == dropped


def test_a_segment_whose_every_record_was_superseded_stays_as_an_empty_segment(spark, s3_root):
    store = ObjectStore(s3_root.root)
    create_topic(store, TOPIC, 1, COMPACTED)
    writer = three_rounds_of_four_keys(store)
    sizes = {e.size for e in load_newest(store, KEYS).segments}
    # segment.bytes one segment's size: the cleaner groups each segment alone (Kafka's grouping)
    store.put(f"topics/{TOPIC}.json", TopicMeta(TOPIC, 1, {**COMPACTED, "segment.bytes": str(max(sizes))},
                                                f"id-{TOPIC}").to_json())
    result = compact(spark, CompactOptions(root=s3_root.root, now_ms=NOW_MS))
    assert "kv-0: 3 -> 3 segments" in format_summary(result), format_summary(result)
    after = load_newest(store, KEYS)
    assert [(e.base_offset, e.end_offset, e.size > 0) for e in after.segments] == [(0, 4, False), (4, 8, False),
                                                                                  (8, 12, True)]
    assert store.get(after.segments[0].key) == b""  # Kafka keeps an emptied segment in the log
    assert values(read_log(store, KEYS)) == [(8 + i, f"r2-k{i}".encode()) for i in range(4)] + [(12, b"tail-k0")]
    plan = BucketLog(s3_root.root).plan(TOPIC, 0, table_uri=s3_root.root.uri("tables", TOPIC), committed=None,
                                        starting=OffsetSpec(EARLIEST), ending=OffsetSpec(LATEST), target_task_bytes=1,
                                        allow_data_loss=False)  # what ingest reads: the empty segments plan no task
    assert sorted(o for t in plan.tasks for o in read_task(t.as_dict())[0]["offset"].to_pylist()) == [8, 9, 10, 11, 12]

    # merge-segments over compacted segments keeps their offsets (not their batches'): a seal still lands
    [merged] = merge_bucket(s3_root.root, (TOPIC,), below_bytes=1 << 20)
    assert [m.outcome for m in merged.merges] == ["merged"]
    assert [(e.base_offset, e.end_offset) for e in load_newest(store, KEYS).segments] == [(0, 12)]
    writer.seal()
    assert load_newest(store, KEYS).end_offset == 13
    assert values(read_log(store, KEYS)) == [(8 + i, f"r2-k{i}".encode()) for i in range(4)] + [(12, b"tail-k0")]


def test_a_transaction_open_in_the_closed_segments_holds_the_round_below_it_and_its_abort_is_indexed(spark,
                                                                                                       s3_root):
    store = ObjectStore(s3_root.root)
    create_topic(store, TOPIC, 1, COMPACTED)
    writer = BucketPartitionWriter(store, TOPIC, 0).take_over()

    def append(data: bytes, count: int) -> None:
        flush(writer.fence, writer.next_offset, writer.epoch, data, deadline=deadline())
        writer.next_offset += count

    writer.flush_changes([(b"a", b"0"), (b"b", b"0")])
    writer.seal()
    writer.flush_changes([(b"a", b"1"), (b"b", b"1")])
    writer.seal()
    producer = dict(producer_id=7, producer_epoch=0, partition_leader_epoch=writer.epoch)
    append(build_batch([Record(4, NOW_MS, b"a", b"aborted-a"), Record(5, NOW_MS, b"z", b"aborted-z")],
                       base_offset=4, is_transactional=True, **producer), 2)
    writer.flush_changes([(b"c", b"1")])
    writer.seal()  # [4, 7): the transaction's records and no marker yet
    writer.flush_changes([(b"a", b"2")])
    writer.seal()
    before = load_newest(store, KEYS)
    # These seals wrote no producer snapshot object: the driver cannot see the transaction, the
    # task's scan holds the round at the base of its segment.
    result = compact(spark, CompactOptions(root=s3_root.root, topics=(TOPIC,), force=True, now_ms=NOW_MS))
    assert not result.errors and len(result.cleaned) == 1, format_summary(result)
    after = load_newest(store, KEYS)
    assert after.cleaner_offset == 4 and after.segments[-2:] == before.segments[-2:]
    assert values(read_log(store, KEYS)) == [(2, b"1"), (3, b"1"), (4, b"aborted-a"), (5, b"aborted-z"), (6, b"1"),
                                             (7, b"2")]

    append(build_end_txn_marker(offset=8, timestamp=NOW_MS, commit=False, **producer), 1)
    writer.flush_changes([(b"d", b"1")])
    writer.seal()
    result = compact(spark, CompactOptions(root=s3_root.root, topics=(TOPIC,), force=True, now_ms=NOW_MS))
    assert len(result.cleaned) == 1, format_summary(result)
    data = values(b for b in read_log(store, KEYS) if not b.header.is_control)
    assert data == [(3, b"1"), (6, b"1"), (7, b"2"), (9, b"1")]  # z's aborted record went, though no key replaced it
    # The ABORT marker stays (its records were cleaned in this round), so does its .txnindex entry
    # (its start from the cleaner's scan: the marker's segment, sealed without one, does not know it).
    cleaned = load_newest(store, KEYS).segments
    assert all(e.txn_index_key is not None for e in cleaned)
    assert [(txn.producer_id, txn.first_offset, txn.last_offset) for e in cleaned
            for txn in known_aborted(store, e)] == [(7, 4, 8)]


def test_max_compaction_lag_ms_cleans_a_partition_below_the_dirty_ratio(spark, s3_root):
    store = ObjectStore(s3_root.root)
    create_topic(store, TOPIC, 1, {**COMPACTED, "min.cleanable.dirty.ratio": "0.9"})
    writer = three_rounds_of_four_keys(store)
    assert len(compact(spark, CompactOptions(root=s3_root.root, now_ms=NOW_MS)).cleaned) == 1  # all dirty: 1.0
    writer.seal()
    writer.flush_changes([(b"k1", b"again")])
    writer.seal()  # dirty now: the two 1-record segments, far below 0.9 of the log

    def summary() -> str:
        return format_summary(compact(spark, CompactOptions(root=s3_root.root, topics=(TOPIC,), now_ms=NOW_MS)))

    assert "skipped (dirty ratio" in summary()
    # the oldest dirty segment's first batch (one ranged GET: timestamps 1.7e12 + offset) is overdue
    store.put(f"topics/{TOPIC}.json", TopicMeta(TOPIC, 1, {**COMPACTED, "min.cleanable.dirty.ratio": "0.9",
                                                           "max.compaction.lag.ms": "1000"}, f"id-{TOPIC}").to_json())
    assert "kv-0: 3 -> 1 segments" in summary()
    assert values(read_log(store, KEYS)) == [(10, b"r2-k2"), (11, b"r2-k3"), (12, b"tail-k0"), (13, b"again")]
