"""`topiclake dump-log`: what kafka-dump-log.sh shows, for .log, .index, .timeindex, .txnindex and
producer .snapshot files.

Cluster mode (the segment's directory has `leader-epochs/`): the dump shows the log as every reader
sees it (segments.leader_reads). A batch that is not part of the log (a fenced leader's late
write, a stale tail past the next segment, offsets a takeover in progress has not decided) is not
dumped: one `skipped` line names its offsets, epoch and place, and why; a whole segment file that
is not part of the log says so first. The last line counts what was skipped. A fenced leader may
be writing the file right now, so a partial batch at its end is not an error there.
"""

from __future__ import annotations

import base64
import json
import mmap
import sys
from pathlib import Path
from typing import Iterable

import typer

from topiclake.segments import legacy
from topiclake.segments.batch import Record, RecordBatch, TimestampType
from topiclake.segments.control import parse_control_record
from topiclake.segments.errors import CorruptRecordError, TopiclakeError
from topiclake.segments.filenames import LOG_SUFFIX, parse_name
from topiclake.segments.leader_reads import ReadEpochs, read_epochs
from topiclake.segments.records_file import iter_entries

from .output import DEBUG_OPTION, describe_exception, print_error, reported_errors

INDEX_SUFFIXES = (".index", ".timeindex", ".txnindex", ".snapshot")


def register(app: typer.Typer) -> None:
    app.command("dump-log")(dump_log)


def dump_log(
    paths: list[Path] = typer.Argument(..., help=".log, .index, .timeindex, .txnindex or .snapshot files",
                                       exists=True, dir_okay=False),
    print_data: bool = typer.Option(False, "--print-data", help="Print every record with key and value."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per batch (bytes as base64)."),
    debug: bool = DEBUG_OPTION,
) -> None:
    """Dump batches and records of a segment, or the entries of an index (like kafka-dump-log).
    A file that is corrupt or cannot be read prints what is valid, then one error line; the
    other files are still dumped, and the exit code is 1."""
    failed = False
    with reported_errors(debug):
        for path in paths:
            if not as_json:
                typer.echo(f"Dumping {path}")
            try:
                if path.suffix == ".log":
                    _dump_segment(path, print_data, as_json)
                elif path.suffix in INDEX_SUFFIXES:
                    _dump_index(path, as_json)
                else:
                    raise TopiclakeError(f"{path}: not a .log, .index, .timeindex, .txnindex or .snapshot file")
            except (TopiclakeError, OSError) as exc:
                if debug:
                    raise
                print_error(describe_exception(exc))
                failed = True
    if failed:
        raise typer.Exit(1)


def _read(path: Path):
    size = path.stat().st_size
    if size == 0:
        return b""
    with path.open("rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _dump_segment(path: Path, print_data: bool, as_json: bool) -> None:
    data = _read(path)
    base = int(path.name.split(".", 1)[0]) if path.name.split(".", 1)[0].isdigit() else 0
    if not as_json:
        typer.echo(f"Log starting offset: {base}")
    view = _LogView.of(path, base)
    if view is not None:
        view.announce(as_json)
    for entry in iter_entries(data, source=str(path), validate=False, allow_partial_tail=view is not None):
        if isinstance(entry, RecordBatch):
            if view is not None and view.skip(entry, as_json):
                continue
            valid = entry.is_valid()
            # A batch whose CRC fails is listed (isValid false) but its records are not trusted.
            records = entry.records() if valid and (print_data or as_json) else []
            _emit(_batch_fields(entry, valid), entry, records, print_data, as_json)
            if not valid:
                raise CorruptRecordError(f"CRC mismatch in batch at offset {entry.base_offset}",
                                         source=str(path), position=entry.position)
        else:
            _emit(_legacy_fields(entry), None, list(entry.records()) if (print_data or as_json) else [],
                  print_data, as_json)
    if view is not None:
        view.summary(as_json)


class _LogView:
    """What of one segment file is part of its partition's log, by the leader epochs."""

    def __init__(self, path: Path, epochs: ReadEpochs, outside: str | None, limit: int | None):
        self.path, self.epochs, self.outside, self.limit = path, epochs, outside, limit
        self.batches = self.skipped = 0

    @classmethod
    def of(cls, path: Path, base: int) -> "_LogView | None":
        epochs = read_epochs(path.parent, wait_s=0)  # a dump never waits: it says what is undecided
        if epochs is None:
            return None
        bases = sorted(p.base_offset for n in path.parent.iterdir()
                       if (p := parse_name(n.name)) is not None and p.kind == LOG_SUFFIX and not p.transient)
        counted, skipped = epochs.counted(path.parent, bases)
        following = [b for b in counted if b > base]
        return cls(path, epochs, dict(skipped).get(base), epochs.limit(following[0] if following else None))

    def announce(self, as_json: bool) -> None:
        if as_json:
            return
        if self.epochs.bound is not None:
            typer.echo(f"Leader takeover in progress (epoch {self.epochs.history.claimed} claimed, its start not "
                       f"recorded): offsets from {self.epochs.bound} are not decided yet")
        if self.outside is not None:
            typer.echo(f"Segment not part of the log: {self.outside}")

    def skip(self, batch: RecordBatch, as_json: bool) -> bool:
        """Whether the batch is not part of the log (then its `skipped` line is printed)."""
        self.batches += 1
        reason = "in a segment file that is not part of the log" if self.outside else \
            self.epochs.skip_reason(batch.header, self.limit)
        if reason is None:
            return False
        self.skipped += 1
        h = batch.header
        fields = {"baseOffset": h.base_offset, "lastOffset": h.last_offset, "partitionLeaderEpoch":
                  h.partition_leader_epoch, "position": batch.position, "size": h.size}
        if as_json:
            sys.stdout.write(json.dumps({**fields, "skipped": reason}) + "\n")
        else:
            typer.echo("skipped " + " ".join(f"{k}: {v}" for k, v in fields.items()) + f" reason: {reason}")
        return True

    def summary(self, as_json: bool) -> None:
        if not as_json:
            typer.echo(f"Skipped {self.skipped} of {self.batches} batches: not part of the log by the leader epochs "
                       f"in {self.path.parent / 'leader-epochs'}")


def _batch_fields(batch: RecordBatch, valid: bool) -> dict:
    h = batch.header
    return {
        "baseOffset": h.base_offset, "lastOffset": h.last_offset, "count": h.records_count,
        "baseSequence": h.base_sequence, "lastSequence": h.last_sequence, "producerId": h.producer_id,
        "producerEpoch": h.producer_epoch, "partitionLeaderEpoch": h.partition_leader_epoch,
        "isTransactional": h.is_transactional, "isControl": h.is_control, "deleteHorizonMs": h.delete_horizon,
        "position": batch.position, h.timestamp_type.label: h.max_timestamp, "size": h.size, "magic": h.magic,
        "compression": h.compression.label, "crc": h.crc, "isValid": valid,
    }


def _legacy_fields(entry: legacy.LegacyEntry) -> dict:
    return {
        "baseOffset": entry.base_offset, "lastOffset": entry.last_offset, "count": len(entry.records()),
        "producerId": -1, "position": entry.position, entry.timestamp_type.label: entry.timestamp,
        "size": entry.size, "magic": entry.magic, "compression": entry.compression.label, "crc": entry.crc,
        "isValid": True,
    }


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _emit(fields: dict, batch: RecordBatch | None, records: Iterable[Record], print_data: bool,
          as_json: bool) -> None:
    if as_json:
        fields = dict(fields, records=[
            {"offset": r.offset, "timestamp": r.timestamp, "key": _b64(r.key), "value": _b64(r.value),
             "headers": [{"key": k, "value": _b64(v)} for k, v in r.headers]}
            for r in records
        ])
        sys.stdout.write(json.dumps(fields) + "\n")
        return
    typer.echo(" ".join(f"{k}: {_text(v)}" for k, v in fields.items()))
    if not print_data:
        return
    ts_label = (batch.header.timestamp_type if batch else TimestampType.CREATE_TIME).label
    for r in records:
        line = (f"| offset: {r.offset} {ts_label}: {r.timestamp} keySize: {_size(r.key)} "
                f"valueSize: {_size(r.value)} headerKeys: [{','.join(k for k, _ in r.headers)}]")
        if batch is not None and batch.is_control:
            control = parse_control_record(r)
            line += f" endTxnMarker: {control.type.name} coordinatorEpoch: {control.coordinator_epoch}"
        else:
            if r.key is not None:
                line += f" key: {_printable(r.key)}"
            line += f" payload: {_printable(r.value)}"
        typer.echo(line)


def _text(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "OptionalLong.empty" if value is None else str(value)


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _printable(data: bytes | None) -> str:
    if data is None:
        return "null"
    return data.decode("utf-8", errors="backslashreplace")


def _dump_index(path: Path, as_json: bool) -> None:
    from topiclake.segments.filenames import parse_name
    from topiclake.segments.offset_index import dump_offset_index
    from topiclake.segments.producer_snapshot import read_snapshot
    from topiclake.segments.time_index import dump_time_index
    from topiclake.segments.txn_index import read_txn_index

    parsed = parse_name(path.name)
    if parsed is None:
        raise TopiclakeError(f"{path}: not a segment file name (20 digits, then {path.suffix}): the base offset "
                             "its entries are relative to is unknown")
    base = parsed.base_offset
    if path.suffix == ".index":
        entries = 0
        for entry in dump_offset_index(path, base):
            _index_line({"offset": entry.offset, "position": entry.position}, as_json)
            entries += 1
        if not entries and not as_json:
            typer.echo(f"{path} is empty.")
    elif path.suffix == ".txnindex":
        for e in read_txn_index(path, base):
            _index_line({"producerId": e.producer_id, "firstOffset": e.first_offset, "lastOffset": e.last_offset,
                         "lastStableOffset": e.last_stable_offset}, as_json)
    elif path.suffix == ".snapshot":
        for e in read_snapshot(path):
            _index_line({"producerId": e.producer_id, "producerEpoch": e.epoch, "coordinatorEpoch": e.coordinator_epoch,
                         "currentTxnFirstOffset": e.current_txn_first_offset, "lastSequence": e.last_sequence,
                         "lastOffset": e.last_offset, "offsetDelta": e.offset_delta, "timestamp": e.timestamp},
                        as_json)
    else:
        for entry in dump_time_index(path, base):
            _index_line({"timestamp": entry.timestamp, "offset": entry.offset}, as_json)


def _index_line(fields: dict, as_json: bool) -> None:
    typer.echo(json.dumps(fields) if as_json else " ".join(f"{k}: {v}" for k, v in fields.items()))
