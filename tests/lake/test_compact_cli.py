"""`topiclake compact`'s summary: the partitions it compacted, then one line counting the skipped
ones by reason (with --topic: the named topics' skipped partitions one by one)."""

from __future__ import annotations

import re
import time

from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.segments.storage import StorageLayout, TopicRegistry

from .compaction_model import append_more, write_workload

runner = CliRunner()


def compact(root, *args: str):
    result = runner.invoke(app, ["compact", "--data", str(root), *args])
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_summary_lists_compacted_partitions_and_counts_the_skipped(spark, root):
    write_workload(root, "done", seed=1, ops=30)
    write_workload(root, "lazy", seed=2, ops=30, config={"min.cleanable.dirty.ratio": "0.9"})
    first = compact(root, "--topic", "done,lazy")
    assert len([line for line in first if re.match(r"  (done|lazy)-0: \d+ -> \d+ segments", line)]) == 2, first

    append_more(root, "lazy", 0, 3, now_ms=int(time.time() * 1000))  # a little dirt: ratio below 0.9
    write_workload(root, "fresh", seed=3, ops=30)
    registry = TopicRegistry(StorageLayout(root))
    registry.create("plain", 2, {"cleanup.policy": "delete"})
    registry.create("empty", 1, {"cleanup.policy": "compact"})

    lines = compact(root)
    assert lines[0].startswith("compact run ") and " 1 partitions cleaned, " in lines[0]
    assert re.fullmatch(r"  fresh-0: \d+ -> \d+ segments, .* cleaner checkpoint \d+", lines[1]), lines
    assert len(lines) == 3, lines
    counted, _, reasons = lines[2].partition(": ")
    assert counted == "  skipped 5 partitions"
    assert sorted(reasons.split(", ")) == sorted([
        "2 in topics without cleanup.policy=compact", "1 with nothing to clean",
        "1 below min.cleanable.dirty.ratio", "1 without segments"])

    named = compact(root, "--topic", "done", "--topic", "lazy")
    assert named[1].startswith("  done-0: skipped (nothing cleanable (dirty from ")
    assert named[2].startswith("  lazy-0: skipped (dirty ratio ") and len(named) == 3, named


def test_a_named_topic_that_is_not_compacted_is_one_error_line(tmp_path):
    root = tmp_path / "data"
    TopicRegistry(StorageLayout(root)).create("plain", 1, {"cleanup.policy": "delete"})
    result = runner.invoke(app, ["compact", "--data", str(root), "--topic", "plain"])
    assert result.exit_code == 1
    assert result.stderr == ("error: topic 'plain' has cleanup.policy=delete: only compacted topics are "
                             "compacted\n")
