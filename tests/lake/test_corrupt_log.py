"""A corrupt log stops the lake loudly (issue 31): a damaged batch length in the active segment
(later batches whole) fails ingest in one line naming topic, partition, offset, file and byte
position, with nothing committed past it, run after run; backfill over damaged offsets fails the
same way; coverage shows the gap as corrupt and `topiclake metrics` exposes it with the lag that
is left; `topiclake repair-log` says what a repair drops (--dry-run changes nothing), truncates
there as Kafka's recovery does, and ingest goes on, saying which offsets the repair lost."""

from __future__ import annotations

import struct

from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.lake.jobs.main import backfill_main, coverage_main, ingest_main

from tests.support.lake import read_table

runner = CliRunner()


def damage_length(path, batch: int) -> int:
    """Set the length field of the file's `batch`-th batch to 0x7fffffff; returns its position."""
    data = path.read_bytes()
    pos = 0
    for _ in range(batch):
        pos += struct.unpack_from(">i", data, pos + 8)[0] + 12
    with open(path, "r+b") as f:
        f.seek(pos + 8)
        f.write(struct.pack(">i", 0x7FFFFFFF))
    return pos


def error_line(capsys) -> str:
    _out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def committed(root, table: str = "t") -> list[int]:
    _table, rows = read_table(str(root / "tables" / table))
    return sorted(rows.column("offset").to_pylist())


def test_a_damaged_batch_stops_ingest_and_backfill_loudly_and_is_shown_until_repaired(spark, root, topic_writer,
                                                                                      capsys):
    w = topic_writer("t")
    for _ in range(10):
        w.produce(0, [b"v"] * 10)  # offsets 0..99, one segment
    w.roll(0)
    ingest = ["--topic", "t", "--data", str(root), "--bootstrap", "none"]
    assert ingest_main(ingest) == 0
    for _ in range(5):
        w.produce(0, [b"w"] * 10)  # offsets 100..149 in the active segment
    active = w.path(0)
    position = damage_length(active, 2)  # the batch of offsets 120..129; 130..149 stay whole after it
    capsys.readouterr()

    expected = (f"error: corrupt log: topic 't' partition 0 at offset 120: {active}, position {position}: batch "
                "length 2147483647 runs past the end of any segment (2147483647 bytes) (hint: nothing from offset "
                "120 on can be read; see what a repair drops with `topiclake repair-log --topic t --partition 0 "
                "--dry-run` (docs/LAKE.md))")
    for _run in range(2):  # every run fails the same way: never a silent "nothing new"
        assert ingest_main(ingest) == 1
        assert error_line(capsys) == expected
        assert committed(root) == list(range(100))

    result = runner.invoke(app, ["coverage", "--table", "t", "--topic", "t", "--data", str(root)])
    assert result.exit_code == 3, result.output
    assert result.output.strip().splitlines()[-2:] == ["t-0: committed 100; holds [0, 100)",
                                                       "  gap [120, 150) corrupt"]
    capsys.readouterr()

    shown = runner.invoke(app, ["metrics", "--data", str(root)])
    assert shown.exit_code == 0, shown.output
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(shown.output) for s in family.samples}
    where = (("partition", "0"), ("topic", "t"))
    assert samples[("topiclake_log_corrupt", where)] == 1
    assert samples[("topiclake_log_corrupt_offset", where)] == 120
    table_labels = tuple(sorted({"table": "t", "group": "topiclake-ingest-t", "topic": "t", "partition": "0"}.items()))
    assert samples[("topiclake_table_lag_records", table_labels)] == 50

    # damage in data already ingested: a backfill that rereads it fails the same way
    old = root / "log" / "t-0" / "00000000000000000000.log"
    old_position = damage_length(old, 3)
    assert backfill_main(["--table", "t", "--topic", "t", "--partition", "0", "--from", "0", "--to", "100",
                          "--data", str(root)]) == 1
    assert error_line(capsys).startswith(f"error: corrupt log: topic 't' partition 0 at offset 30: {old}, "
                                         f"position {old_position}: ")


def test_repair_log_says_what_it_drops_then_truncates_and_ingest_goes_on(spark, root, topic_writer, capsys):
    w = topic_writer("t")
    for _ in range(5):
        w.produce(0, [b"v"] * 10)
    active = w.path(0)
    position = damage_length(active, 2)
    before = active.read_bytes()
    repair = ["repair-log", "--topic", "t", "--partition", "0", "--data", str(root)]

    dry = runner.invoke(app, [*repair, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.strip() == (
        f"would truncate t-0 at offset 20: cut 00000000000000000000.log at position {position} "
        f"({len(before) - position} bytes); offsets [20, 50) would be lost and the next append would reuse offset 20 "
        "(damage: batch length 2147483647 runs past the end of any segment (2147483647 bytes))")
    assert active.read_bytes() == before and sorted(p.name for p in active.parent.iterdir()) == [active.name]

    done = runner.invoke(app, repair)
    assert done.exit_code == 0, done.output
    said = [line for line in done.output.splitlines() if line.startswith("truncated t-0 at offset 20: ")]
    assert len(said) == 1 and "offsets [20, 50) are lost" in said[0] and said[0].endswith("the log now ends at 20")
    assert active.read_bytes() == before[:position]
    again = runner.invoke(app, repair)
    assert again.output.strip().endswith("no damage found (every batch from offset 0 reads whole); nothing to repair")

    w.next_offset[0] = 20  # the next append reuses the lost offsets, as after Kafka's recovery
    w.produce(0, [b"after"] * 5)
    capsys.readouterr()
    assert ingest_main(["--topic", "t", "--data", str(root), "--bootstrap", "none"]) == 0
    assert committed(root) == list(range(25))
    said = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("t-0:")]
    assert said == [f"t-0: offsets [0, 25) 25 records in 1 files, LOST [20, 50) of the damaged log to `topiclake "
                    f"repair-log` (it cut {active.name} at position {position}; offsets from 20 on are records "
                    "appended since)"]
