"""Error lines stay whole when the output is piped (rich wraps at 80 columns off a terminal)."""

from __future__ import annotations

import os
import subprocess
import sys

LONG = "a-directory-name-long-enough-that-no-terminal-of-80-columns-holds-it-" * 3


def run(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TOPICLAKE_ROOT", "TOPICLAKE_CONFIG", "COLUMNS")}
    return subprocess.run([sys.executable, "-m", "topiclake.cli", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=env)


def test_a_usage_error_with_a_long_path_is_one_line(tmp_path):
    missing = tmp_path / LONG / "00000000000000000000.log"
    result = run("dump-log", str(missing), cwd=tmp_path)
    assert result.returncode == 2
    assert f"Error: Invalid value for 'paths': file '{missing}' does not exist." in result.stderr.splitlines()
    assert "╭" not in result.stderr


def test_command_errors_with_a_long_path_are_one_line(tmp_path):
    root = tmp_path / LONG
    (root / "topics").mkdir(parents=True)
    result = run("compact", "--data", str(root), "--topic", "missing", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"error: unknown topic 'missing' (no {root}/topics/missing.json)"]

    (tmp_path / "file").write_text("")  # a root under a file: checked before the job runs (a usage error)
    result = run("retain", "--data", str(tmp_path / "file" / LONG), "--topic", "missing", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"error: storage root {tmp_path / 'file' / LONG} does not exist (hint: "
                                          "pass --data DIR, or set $TOPICLAKE_ROOT or [storage] root in the settings "
                                          "file)"]


def test_the_stderr_console_does_not_wrap_when_piped(tmp_path):
    code = "from topiclake.cli.output import stderr_console; stderr_console().print('x' * 300, 'end')"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stderr == "x" * 300 + " end\n"
