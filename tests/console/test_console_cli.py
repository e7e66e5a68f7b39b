"""`topiclake console` on bad input: one error line and exit 1 before serving; a broker that is
down is an error page (HTTP 502), while the console itself keeps serving."""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.support.paths import REPO
from tests.support.broker_process import free_port
from tests.support.console import ConsoleProcess


def console(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "topiclake.cli", "console", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


@pytest.mark.parametrize("args, message", [
    (("--data", "/no/such/root", "--bootstrap", "127.0.0.1:9"), "storage root /no/such/root does not exist"),
    (("--listen", "nowhere"), "--listen 'nowhere' is not HOST:PORT"),
    ((), "no live broker registered under"),
    (("--bootstrap", "127.0.0.1:9", "--security-protocol", "CARRIER_PIGEON"), "is not one of"),
])
def test_bad_input_is_one_line_and_exit_1(tmp_path, args, message):
    done = console(*(args if "--data" in args else ("--data", str(tmp_path), *args)))
    assert done.returncode == 1 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_busy_port_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = console("--data", str(tmp_path), "--bootstrap", "127.0.0.1:9",
                       "--listen", f"127.0.0.1:{taken.getsockname()[1]}")
    assert done.returncode == 1 and "cannot listen on 127.0.0.1:" in done.stderr, done.stderr


def test_a_broker_that_is_down_is_an_error_page(tmp_path):
    nobody = f"127.0.0.1:{free_port()}"
    with ConsoleProcess(tmp_path, nobody, log_path=tmp_path.parent / "console-down.log") as running:
        for path in ("/", "/topics", "/groups/g"):
            with pytest.raises(urllib.error.HTTPError) as failure:
                urllib.request.urlopen(running.url + path, timeout=10)
            assert failure.value.code == 502, path
            assert f"the broker at {nobody} did not answer" in failure.value.read().decode()
        for path in ("/tables", "/schemas"):  # without logins they need no broker
            with urllib.request.urlopen(running.url + path, timeout=10) as page:
                assert page.status == 200, path
        with urllib.request.urlopen(running.url + "/healthz", timeout=10) as ok:
            assert ok.status == 200
        assert running.proc.poll() is None
