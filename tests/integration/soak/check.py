"""The soak's checker: the final log, the Delta tables and the group offsets judged against the
ledger. Every function here takes plain data, so each rule is tested on its own
(tests/integration/test_soak_checker.py) with a planted fault it must catch.

The log is read from the segment files directly (the broker stopped cleanly), every batch
CRC-checked. The rules:

- log: every acknowledged record is at its offset with its key and value, or its topic's policy
  removed it: retention (below the log start offset, cleanup.policy delete) or compaction (a
  record with the same key at a higher offset is in the log; the soak writes no tombstones). No
  value is in the log twice (idempotent and transactional producers never duplicate), none that
  was never produced (a produce in flight at a kill may be there unacknowledged: allowed), and
  no transaction is left open. A transaction the producer committed is committed in the log, one
  it aborted is aborted there.
- tables: judged against the log, not the ledger: every committed record of the log below the
  group's Delta offset exactly once by (partition, offset), with the log's key and value, and no
  aborted record; a row whose record left the log since must be one the policy could remove and
  match what was produced there; an acknowledged record below the Delta offset that is in
  neither is lost (retention must not delete what the ingest group has not read). After the final
  ingest the Delta offset is the partition's last stable offset.
- consumer: every record the read_committed group consumed is the log's record at that offset
  (or one the policy removed since), never an aborted one.
- group offsets: per group and partition, what OffsetCommit acknowledged and what OffsetFetch
  returned never go backwards, and a fetch never returns less than a commit acknowledged
  before it was sent.
"""

from __future__ import annotations

import mmap
import os
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from topiclake.lake.log.source import list_partition
from topiclake.objectlog.keys import PartitionKeys
from topiclake.objectlog.reader import read_log, view_partition
from topiclake.segments.batch import iter_batches
from topiclake.segments.config import LogConfig
from topiclake.segments.errors import CorruptRecordError
from topiclake.segments.leader_epochs import EpochHistory
from topiclake.segments.loader import first_batch
from topiclake.segments.storage import StorageLayout
from topiclake.segments.txn_metadata import AbortedIndex, collect_aborted_txns
from topiclake.store.objects import ObjectStore

from .ledger import Ledger, OffsetSample

SHOWN = 10  # problems listed per check; all are counted


@dataclass(frozen=True, slots=True)
class LogRecord:
    key: bytes | None
    value: bytes | None
    aborted: bool


@dataclass(slots=True)
class PartitionLog:
    """A partition as its segment files hold it: data records at or above the log start offset."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int
    records: dict[int, LogRecord] = field(default_factory=dict)
    latest_by_key: dict[bytes | None, int] = field(default_factory=dict)

    def add(self, offset: int, key: bytes | None, value: bytes | None, aborted: bool) -> None:
        self.records[offset] = LogRecord(key, value, aborted)
        if offset > self.latest_by_key.get(key, -1):
            self.latest_by_key[key] = offset


def read_partition_log(layout: StorageLayout, topic: str, partition: int) -> PartitionLog:
    """The partition as a reader must see it. On a cluster's root (a leader-epoch history) that is
    the readers' rule of docs/CLUSTER.md: only segments whose first batch is valid count, a segment
    is read up to the next counted segment's base, and a batch a fenced leader wrote (its epoch
    does not own its offsets) or tore is not part of the log."""
    files = list_partition(layout, topic, partition)
    history = EpochHistory.load(layout.log_dir(topic, partition))
    clustered = history.claimed is not None
    segments = [s for s in files.segments if not clustered or history.counts_segment(*first_batch(Path(s.path)))]
    batches = []
    maps = []
    for i, segment in enumerate(segments):
        with open(segment.path, "rb") as f:
            size = f.seek(0, 2)
            if size == 0:
                continue
            buf = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        maps.append(buf)
        last = i == len(segments) - 1
        if not clustered:
            batches.extend(iter_batches(buf, source=segment.path, validate=True, allow_partial_tail=last))
            continue
        next_base = None if last else segments[i + 1].base_offset
        try:
            for batch in iter_batches(buf, source=segment.path, validate=True, allow_partial_tail=True):
                h = batch.header
                if next_base is not None and h.base_offset >= next_base:
                    break
                if history.is_valid(h.base_offset, h.partition_leader_epoch, h.last_offset):
                    batches.append(batch)
        except CorruptRecordError:
            pass  # a torn write of a fenced leader: nothing after it counts
    # The newest segment file's base, even empty (the readers' listing leaves empty files out): a
    # new leader continues in a segment of its own, after a gap when its base was taken
    # (leader_fence step 4); the broker's log end is there.
    end = max(_segment_bases(layout.log_dir(topic, partition)), default=files.log_start_offset)
    out = partition_log_of(batches, files.log_start_offset, end)
    del batches
    return out


def read_bucket_partition_log(store: ObjectStore, topic: str, partition: int) -> PartitionLog:
    """The partition as a reader of an object-store root sees it: objectlog's reader (the newest
    manifest's segments, then the flush objects whose epoch owns their offsets)."""
    keys = PartitionKeys(topic, partition)
    view = view_partition(store, keys)
    batches = list(read_log(store, keys, view=view))
    start = view.manifest.log_start_offset
    return partition_log_of(batches, start, max((b.next_offset for b in batches), default=start))


def partition_log_of(batches: list, log_start_offset: int, end: int) -> PartitionLog:
    """The data records of a partition's valid batches, each marked aborted or not, with the
    high watermark (`end` or past the last batch) and the last stable offset."""
    aborted = AbortedIndex(collect_aborted_txns(batches))
    open_txns: dict[int, int] = {}
    out = PartitionLog(log_start_offset, 0, 0)
    for batch in batches:
        h = batch.header
        end = max(end, h.next_offset)
        if h.is_transactional:
            if h.is_control:
                open_txns.pop(h.producer_id, None)
                continue
            open_txns.setdefault(h.producer_id, h.base_offset)
        elif h.is_control:
            continue
        is_aborted = aborted.is_aborted(h)
        for r in batch.records():
            if r.offset >= log_start_offset:
                out.add(r.offset, r.key, r.value, is_aborted)
    out.high_watermark = end
    out.last_stable_offset = min(open_txns.values(), default=end)
    return out


@dataclass(slots=True)
class Check:
    name: str
    problems: list[str] = field(default_factory=list)
    count: int = 0

    def fail(self, problem: str) -> None:
        self.count += 1
        if len(self.problems) < SHOWN:
            self.problems.append(problem)

    @property
    def passed(self) -> bool:
        return self.count == 0


@dataclass(slots=True)
class Verdict:
    checks: list[Check] = field(default_factory=list)
    lost: int = 0
    duplicated: int = 0
    offsets_reused: int = 0
    removed_by_compaction: int = 0
    removed_by_retention: int = 0
    table_rows: int = 0

    def check(self, name: str) -> Check:
        self.checks.append(Check(name))
        return self.checks[-1]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def removal_reason(log: PartitionLog, config: LogConfig, offset: int, key: bytes | None) -> str | None:
    """Why a record absent from the log may be gone: "retention", "compacted", or None."""
    if config.delete and offset < log.log_start_offset:
        return "retention"
    if config.compact and log.latest_by_key.get(key, -1) > offset:
        return "compacted"
    return None


def check_log(verdict: Verdict, logs: Mapping[tuple[str, int], PartitionLog], configs: Mapping[str, LogConfig],
              ledger: Ledger) -> None:
    lost = verdict.check("every acknowledged record is in the log or was removed by its topic's policy")
    for ack in ledger.acks:
        log = logs[(ack.topic, ack.partition)]
        rec = log.records.get(ack.offset)
        where = f"{ack.topic}-{ack.partition}@{ack.offset}"
        if rec is not None:
            if (rec.key, rec.value) != (ack.key, ack.value):
                lost.fail(f"{where}: acknowledged {ack.value[:40]!r}, the log holds {(rec.value or b'')[:40]!r}")
            continue
        reason = removal_reason(log, configs[ack.topic], ack.offset, ack.key)
        if reason == "retention":
            verdict.removed_by_retention += 1
        elif reason == "compacted":
            verdict.removed_by_compaction += 1
        else:
            lost.fail(f"{where}: acknowledged {ack.value[:40]!r}, not in the log (log start "
                      f"{log.log_start_offset}, high watermark {log.high_watermark})")
    verdict.lost += lost.count

    reused = verdict.check("no offset was acknowledged to two records")
    told: dict[tuple[str, int, int], bytes] = {}
    for ack in ledger.acks:
        where = (ack.topic, ack.partition, ack.offset)
        if where in told and told[where] != ack.value:
            reused.fail(f"{ack.topic}-{ack.partition}@{ack.offset}: acknowledged {told[where][:40]!r} and "
                        f"{ack.value[:40]!r}")
        told.setdefault(where, ack.value)
    verdict.offsets_reused += reused.count

    dups = verdict.check("no record is in the log twice")
    phantoms = verdict.check("the log holds only records that were produced")
    open_txns = verdict.check("no transaction is left open")
    for (topic, partition), log in sorted(logs.items()):
        seen = Counter(rec.value for rec in log.records.values())
        for value, n in seen.items():
            if n > 1:
                dups.fail(f"{topic}-{partition}: {value[:40]!r} {n} times")
        for offset, rec in log.records.items():
            if rec.value not in ledger.sent:
                phantoms.fail(f"{topic}-{partition}@{offset}: {(rec.value or b'')[:40]!r} was never produced")
        if log.last_stable_offset < log.high_watermark:
            open_txns.fail(f"{topic}-{partition}: open from {log.last_stable_offset} (log end {log.high_watermark})")
    verdict.duplicated += dups.count

    outcomes = verdict.check("a transaction the producer committed is committed in the log, one it aborted is aborted")
    for ack in ledger.acks:
        if ack.txn is None:
            continue
        rec = logs[(ack.topic, ack.partition)].records.get(ack.offset)
        told = ledger.txn_outcomes.get(ack.txn)
        if rec is not None and told in ("committed", "aborted") and rec.aborted != (told == "aborted"):
            outcomes.fail(f"{ack.topic}-{ack.partition}@{ack.offset}: transaction {ack.txn} was {told}, "
                          f"the log has it {'aborted' if rec.aborted else 'committed'}")


@dataclass(frozen=True, slots=True)
class TableRows:
    """A topic's Delta table: (partition, offset, key, value) rows and the group's offsets."""

    rows: Sequence[tuple[int, int, bytes | None, bytes | None]]
    offsets: Mapping[int, int | None]  # partition -> next offset to read (the Delta txn version)


def check_tables(verdict: Verdict, logs: Mapping[tuple[str, int], PartitionLog], configs: Mapping[str, LogConfig],
                 tables: Mapping[str, TableRows], ledger: Ledger) -> None:
    once = verdict.check("tables: every committed record of the log exactly once")
    aborted = verdict.check("tables: no aborted record")
    foreign = verdict.check("tables: every row is a committed record of the log, or was one")
    complete = verdict.check("tables: the final ingest reached each partition's last stable offset")
    acks_by_position = {(a.topic, a.partition, a.offset): a for a in ledger.acks}
    for topic, table in sorted(tables.items()):
        held = Counter((p, o) for p, o, _k, _v in table.rows)
        for (p, o), n in held.items():
            if n > 1:
                once.fail(f"{topic}-{p}@{o}: {n} rows")
                verdict.duplicated += n - 1
        verdict.table_rows += len(table.rows)
        for p, o, key, value in table.rows:
            log = logs[(topic, p)]
            where = f"{topic}-{p}@{o}"
            upto = table.offsets.get(p) or 0
            if o >= upto:
                foreign.fail(f"{where}: at or above the group's committed offset {upto}")
            if ledger.txn_outcomes.get(ledger.sent.get(value)) == "aborted":
                aborted.fail(f"{where}: {value[:40]!r} of aborted transaction {ledger.sent.get(value)}")
                continue
            rec = log.records.get(o)
            if rec is not None:
                if rec.aborted:
                    aborted.fail(f"{where}: aborted in the log")
                elif (rec.key, rec.value) != (key, value):
                    foreign.fail(f"{where}: row {(value or b'')[:40]!r}, log {(rec.value or b'')[:40]!r}")
                continue
            ack = acks_by_position.get((topic, p, o))
            produced = ack is None and value in ledger.sent  # written at a kill, never acknowledged
            matches = produced or (ack is not None and (ack.key, ack.value) == (key, value))
            if not matches or removal_reason(log, configs[topic], o, key) is None:
                foreign.fail(f"{where}: row {(value or b'')[:40]!r} is not in the log and was not removed by policy")
        for (t, p), log in logs.items():
            if t != topic:
                continue
            upto = table.offsets.get(p) or 0
            for o, rec in log.records.items():
                if o < upto and not rec.aborted and (p, o) not in held:
                    once.fail(f"{topic}-{p}@{o}: in the log below the committed offset {upto}, not in the table")
                    verdict.lost += 1
            if upto != log.last_stable_offset:
                complete.fail(f"{topic}-{p}: committed offset {upto}, last stable offset {log.last_stable_offset}")
        for ack in ledger.acks:  # gone from the log before the ingest read it: only compaction may do that
            if ack.topic != topic or (ack.partition, ack.offset) in held:
                continue
            log = logs[(topic, ack.partition)]
            if (ack.offset in log.records or ack.offset >= (table.offsets.get(ack.partition) or 0)
                    or ledger.txn_outcomes.get(ack.txn) == "aborted"):
                continue
            if removal_reason(log, configs[topic], ack.offset, ack.key) != "compacted":
                once.fail(f"{topic}-{ack.partition}@{ack.offset}: acknowledged, left the log unread by the ingest")
                verdict.lost += 1


def check_consumed(verdict: Verdict, logs: Mapping[tuple[str, int], PartitionLog], configs: Mapping[str, LogConfig],
                   ledger: Ledger) -> None:
    read = verdict.check("consumer: every record read is the log's record at its offset, never an aborted one")
    for (topic, p, o), (key, value) in ledger.consumed.items():
        log = logs[(topic, p)]
        rec = log.records.get(o)
        where = f"{topic}-{p}@{o}"
        if rec is None:
            if value not in ledger.sent or removal_reason(log, configs[topic], o, key) is None:
                read.fail(f"{where}: read {(value or b'')[:40]!r}, not in the log")
        elif (rec.key, rec.value) != (key, value):
            read.fail(f"{where}: read {(value or b'')[:40]!r}, the log holds {(rec.value or b'')[:40]!r}")
        elif rec.aborted or ledger.txn_outcomes.get(ledger.sent.get(value)) == "aborted":
            read.fail(f"{where}: read an aborted record (read_committed)")


def check_group_offsets(verdict: Verdict, commits: Iterable[OffsetSample], observations: Iterable[OffsetSample]) -> None:
    backwards = verdict.check("group offsets: committed offsets never go backwards")
    for label, samples in (("acknowledged commit", commits), ("fetched offset", observations)):
        last: dict[tuple[str, str, int], OffsetSample] = {}
        for s in sorted(samples, key=lambda s: s.at):
            k = (s.group, s.topic, s.partition)
            if k in last and s.offset < last[k].offset:
                backwards.fail(f"{s.group} {s.topic}-{s.partition}: {label} {s.offset} after {last[k].offset}")
            last[k] = s
    acked: dict[tuple[str, str, int], list[OffsetSample]] = defaultdict(list)
    for s in sorted(commits, key=lambda s: s.at):
        acked[(s.group, s.topic, s.partition)].append(s)
    for s in observations:
        before = [c.offset for c in acked.get((s.group, s.topic, s.partition), ()) if c.at < s.at]
        if before and s.offset < max(before):
            backwards.fail(f"{s.group} {s.topic}-{s.partition}: fetched {s.offset} after {max(before)} "
                           "was acknowledged")


def check_clients(verdict: Verdict, ledger: Ledger, transactional_topics: set[str]) -> None:
    failed = verdict.check("producers: no delivery failed, no fatal error")
    for topic, value, error in ledger.delivery_errors:
        if topic in transactional_topics and ledger.txn_outcomes.get(ledger.sent.get(value)) != "committed":
            continue  # an aborted transaction's purged records
        failed.fail(f"{topic}: {value[:40]!r}: {error}")
    for error in ledger.fatal_errors:
        failed.fail(error)


def _segment_bases(directory: Path) -> list[int]:
    """The base offset of every regular `.log` file in a partition directory, empty ones too."""
    from topiclake.segments import filenames

    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    parsed = (filenames.parse_name(name) for name in names)
    return [p.base_offset for p in parsed if p is not None and not p.transient and p.kind == filenames.LOG_SUFFIX]
