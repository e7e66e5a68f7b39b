"""`topiclake merge-segments` refuses a directory root in one line, and an unknown topic on a
bucket root before it changes anything."""

from __future__ import annotations

import os

from typer.testing import CliRunner

from topiclake.cli import app

runner = CliRunner()


def test_a_directory_root_is_refused_in_one_line(tmp_path):
    result = runner.invoke(app, ["merge-segments", "--data", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"error: merge-segments serves object-store roots (s3://bucket/prefix) only, not {tmp_path}"]


def test_an_unknown_topic_is_refused(s3_root, monkeypatch):
    for name, value in s3_root.env.items():
        monkeypatch.setitem(os.environ, name, value)
    result = runner.invoke(app, ["merge-segments", "--data", str(s3_root.root), "--topic", "nope"])
    assert result.exit_code == 1
    assert "unknown topic(s)" in result.output and "nope" in result.output
