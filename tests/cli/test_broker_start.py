"""`topiclake broker start` that cannot start: one line on stderr naming the problem, exit 1,
no traceback (unless --debug). Each case runs the real command in a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def start_broker(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`topiclake broker start ARGS` in `cwd` (no conf/topiclake.toml there: defaults apply)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TOPICLAKE_ROOT", "TOPICLAKE_CONFIG")}
    return subprocess.run([sys.executable, "-m", "topiclake.cli", "broker", "start", *args],
                          capture_output=True, text=True, timeout=60, cwd=cwd, env=env)


def assert_one_line(result: subprocess.CompletedProcess, expected: str) -> None:
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [expected]


def test_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = start_broker("--data", str(tmp_path / "data"), "--port", str(port), cwd=tmp_path)
    assert_one_line(result, f"error: cannot listen on 127.0.0.1:{port}: Address already in use")
    # A new root stays empty: no cluster id (cluster/meta.json), no lock, no topics.
    assert list((tmp_path / "data").rglob("*")) == []


def test_port_out_of_range(tmp_path):
    result = start_broker("--data", str(tmp_path / "data"), "--port", "70000", cwd=tmp_path)
    assert_one_line(result, "error: port 70000 is out of range (0-65535)")
    assert not (tmp_path / "data").exists(), "nothing is created before the settings are valid"


@pytest.mark.parametrize("host, reason", [
    ("192.0.2.1", "Cannot assign requested address"),  # TEST-NET-1: never an address of this machine
    ("no-such-host.invalid", "Name or service not known"),  # .invalid never resolves (RFC 6761)
])
def test_host_that_cannot_be_bound(tmp_path, host, reason):
    result = start_broker("--data", str(tmp_path / "data"), "--port", "0", "--host", host, cwd=tmp_path)
    assert_one_line(result, f"error: cannot listen on {host}:0: {reason}")


def test_data_is_a_file(tmp_path):
    (tmp_path / "data").write_text("not a directory")
    result = start_broker("--data", str(tmp_path / "data"), "--port", "0", cwd=tmp_path)
    assert_one_line(result, f"error: storage root {tmp_path / 'data'} is not a directory")
    assert (tmp_path / "data").read_text() == "not a directory"


@pytest.fixture
def read_only_dir(tmp_path):
    """A directory this process cannot write in: mode 555, or for root (which ignores the mode)
    the immutable attribute."""
    path = tmp_path / "read-only"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path, "Permission denied"
        path.chmod(0o755)
        return
    subprocess.run(["chattr", "+i", str(path)], check=True)
    try:
        yield path, "Operation not permitted"
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_data_is_not_writable(tmp_path, read_only_dir):
    path, reason = read_only_dir
    result = start_broker("--data", str(path), "--port", "0", cwd=tmp_path)
    assert_one_line(result, f"error: storage root {path} is not writable: {reason}")
    result = start_broker("--data", str(path / "data"), "--port", "0", cwd=tmp_path)
    assert_one_line(result, f"error: cannot create storage root {path / 'data'}: {reason}")
    assert list(path.iterdir()) == []


@pytest.mark.parametrize("text, expected", [
    ("[broker\nport = 1\n", "{path}: Expected ']' at the end of a table declaration (at line 1, column 8)"),
    ("[broker]\nprot = 9092\n", "unknown [broker] settings: prot"),
    ("[broker]\nport = \"9092\"\n", "[broker] port must be an integer, not '9092'"),
])
def test_bad_config_file(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = start_broker("--config", str(path), cwd=tmp_path)
    assert_one_line(result, "error: " + expected.format(path=path))


@pytest.mark.parametrize("text, expected", [
    ("[broker]\nauto_create_topics = 1\n", "[broker] auto_create_topics must be true or false, not 1"),
    ("[broker]\nport = 99999\n", "port 99999 is out of range (0-65535)"),
    ("[broker]\nbroker_id = -1\n", "broker id -1 must not be negative"),
    ("[broker]\nnum_partitions = 0\n", "[broker] num_partitions must be at least 1"),
    ("[broker]\nlease_interval_s = \"10\"\n", "[broker] lease_interval_s must be a number, not '10'"),
    ("[broker]\nadvertised_host = 1\n", "[broker] advertised_host must be a string, not 1"),
    ("[groups]\noffsets_topic_partitions = \"a\"\n", "[groups] offsets_topic_partitions must be an integer, not 'a'"),
    ("[transactions]\nmax_timeout_ms = true\n", "[transactions] max_timeout_ms must be an integer, not True"),
    ("[storage]\nroot = 5\n", "[storage] root must be a string, not 5"),
    ("broker = 1\n", "[broker] in the config file must be a table"),
])
def test_every_invalid_setting_is_named(tmp_path, monkeypatch, text, expected):
    """The same command in-process (the subprocess cases above prove the process's output)."""
    from typer.testing import CliRunner

    from topiclake.cli import app

    monkeypatch.delenv("TOPICLAKE_ROOT", raising=False)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["broker", "start", "--config", str(path)])
    assert result.exit_code == 1 and result.stderr.splitlines() == ["error: " + expected], result.output


def test_missing_config_file_and_bad_log_level(tmp_path):
    result = start_broker("--config", str(tmp_path / "none.toml"), cwd=tmp_path)
    assert_one_line(result, f"error: config file {tmp_path / 'none.toml'} does not exist")
    result = start_broker("--log-level", "chatty", "--data", str(tmp_path / "data"), cwd=tmp_path)
    assert_one_line(result, "error: --log-level chatty is not a logging level (DEBUG, INFO, WARNING, ERROR)")


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "data").write_text("")
    result = start_broker("--data", str(tmp_path / "data"), "--port", "0", "--debug", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.rstrip().splitlines()[-1].endswith(f"storage root {tmp_path / 'data'} is not a directory")


def test_metrics_port_in_use(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = start_broker("--data", str(tmp_path / "data"), "--port", "0", "--metrics-listen",
                              f"127.0.0.1:{port}", cwd=tmp_path)
    assert_one_line(result, f"error: cannot listen on 127.0.0.1:{port} ([metrics]): Address already in use")
    assert list((tmp_path / "data").rglob("*")) == []  # bound with the listeners, before the root is touched


def test_metrics_listen_that_is_not_host_port(tmp_path):
    result = start_broker("--data", str(tmp_path / "data"), "--port", "0", "--metrics-listen", "9404", cwd=tmp_path)
    assert_one_line(result, "error: [metrics] listen must be host:port, not '9404'")
