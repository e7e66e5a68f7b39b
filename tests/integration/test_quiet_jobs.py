"""What a user meets at the terminal, with real processes: spark-submit of jobs/ingest.py on
local-cluster through `.venv/bin/spark-submit` from an environment without the venv (few lines,
no ERROR, exit 0), --verbose bringing Spark's log back, Ctrl-C (SIGINT to the process group, as a
terminal sends it) in the middle of an ingest and of a backfill, and the SQL shell on a pty."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topiclake.lake.runs.ingest import IngestOptions, ingest

from tests.support.lake import TopicWriter, read_table

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def bare_env(tmp_path: Path) -> dict[str, str]:
    """A shell that has not activated the venv: no venv on PATH, no SPARK_HOME, no PYSPARK_*."""
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
            "SPARK_LOCAL_IP": "127.0.0.1"}


def make_topic(root: Path, batches: int) -> None:
    w = TopicWriter(root, "clicks", partitions=2)
    for p in range(2):
        for i in range(batches):
            w.produce(p, [f"p{p}-b{i}-r{j}".encode() for j in range(10)])


def test_spark_submit_of_ingest_on_local_cluster_is_quiet(tmp_path):
    make_topic(tmp_path, 3)
    result = subprocess.run([str(VENV_BIN / "spark-submit"), "--master", "local-cluster[2,1,1024]",
                             "--conf", "spark.ui.enabled=false", str(REPO / "jobs" / "ingest.py"), "--topic", "clicks",
                             "--data", str(tmp_path), "--bootstrap", "none"],
                            env=bare_env(tmp_path), capture_output=True, text=True, timeout=480, cwd=REPO)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    lines = output.strip().splitlines()
    assert len(lines) <= 20, output
    assert not [line for line in lines if "ERROR" in line or "Exception" in line or "Traceback" in line], output
    assert not [line for line in lines if " INFO " in line], output
    assert "clicks-0: offsets [0, 30) 30 records" in result.stdout
    assert read_table(tmp_path / "tables" / "clicks")[1].num_rows == 60


def test_spark_submit_prints_the_summary_first_with_no_spark_noise(tmp_path):
    """As Airflow runs a job: the venv's spark-submit, no SPARK_LOCAL_IP set. No incubator-module
    warning, no "Using Spark's default log4j profile", no hostname / loopback warnings."""
    make_topic(tmp_path, 1)
    env = {k: v for k, v in bare_env(tmp_path).items() if k != "SPARK_LOCAL_IP"}
    result = subprocess.run([str(VENV_BIN / "spark-submit"), "--master", "local[1]", "--conf",
                             "spark.ui.enabled=false", str(REPO / "jobs" / "ingest.py"), "--topic", "clicks",
                             "--data", str(tmp_path), "--bootstrap", "none"],
                            env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == "", result.stderr
    assert result.stdout.splitlines()[0].startswith("ingest run "), result.stdout


def test_verbose_brings_sparks_log_back(tmp_path):
    result = subprocess.run([str(VENV_BIN / "spark-submit"), "--master", "local[1]", "--conf",
                             "spark.ui.enabled=false", str(REPO / "jobs" / "sql.py"), "SELECT 41 + 1 AS answer",
                             "--data", str(tmp_path), "--verbose"],
                            env=bare_env(tmp_path), capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "INFO SparkContext: Running Spark version" in result.stderr
    assert result.stdout.splitlines()[-3:] == ["answer", "------", "42"] or "42" in result.stdout


def interrupt_when(proc: subprocess.Popen, ready, timeout: float = 400) -> None:
    """SIGINT to the process group (what Ctrl-C does) once `ready()` is true."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the job never got going"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)


def parquet_files(table: Path) -> int:
    return len(list(table.rglob("*.parquet")))


def assert_interrupted(proc: subprocess.Popen, job: str) -> str:
    out, err = proc.communicate(timeout=180)
    output = out + err
    assert proc.returncode == 130, output[-4000:]
    assert "Traceback" not in output and "ERROR" not in output, output
    said = [line for line in output.splitlines() if line.startswith(f"{job}: interrupted")]
    assert len(said) == 1, output
    return said[0]


def test_ctrl_c_in_a_spark_submitted_ingest(tmp_path):
    make_topic(tmp_path, 100)  # ~70 small tasks on one core: seconds of work to interrupt
    table = tmp_path / "tables" / "clicks"
    proc = subprocess.Popen([str(VENV_BIN / "spark-submit"), "--master", "local[1]", "--conf",
                             "spark.ui.enabled=false", str(REPO / "jobs" / "ingest.py"), "--topic", "clicks", "--data",
                             str(tmp_path), "--bootstrap", "none", "--target-task-bytes", "1000"],
                            env=bare_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=REPO, start_new_session=True)
    interrupt_when(proc, lambda: parquet_files(table) > 0)
    line = assert_interrupted(proc, "ingest")
    left = parquet_files(table)
    assert left > 0 and line == (
        "ingest: interrupted; nothing was committed; table clicks (group topiclake-ingest-clicks has "
        f"committed nothing yet). The next run resumes from the committed offsets. Files this run wrote and did not "
        f"commit are left, never read: {left} in {table}; `topiclake retain --table NAME --vacuum-hours H` "
        "(Delta's VACUUM) removes them once H hours old")
    assert not (table / "_delta_log").exists()


def test_ctrl_c_in_a_backfill(spark, tmp_path):
    make_topic(tmp_path, 100)
    ingest(spark, IngestOptions(topics=("clicks",), root=tmp_path, bootstrap="none"))
    table = tmp_path / "tables" / "clicks"
    before = parquet_files(table)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "backfill", "--table", "clicks", "--topic",
                             "clicks", "--partition", "0", "--from", "0", "--to", "1000", "--data", str(tmp_path),
                             "--master", "local[1]", "--target-task-bytes", "1000"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    interrupt_when(proc, lambda: parquet_files(table) > before)
    line = assert_interrupted(proc, "backfill")
    assert line == ("backfill: interrupted; nothing was committed: table clicks stays at version 0; "
                    "run the backfill again")
    assert read_table(table)[0].version() == 0


def listening_addresses(port: int) -> set[str]:
    """The IPv4/IPv6 addresses a TCP port listens on (/proc/net/tcp*: state 0A is LISTEN)."""
    import ipaddress

    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, hex_port = local.split(":")
                if state == "0A" and int(hex_port, 16) == port:
                    raw = bytes.fromhex(address)
                    # the kernel prints each 32-bit word in host (little-endian) order
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                    listening = ipaddress.ip_address(words)
                    found.add(str(getattr(listening, "ipv4_mapped", None) or listening))  # ::ffff:127.0.0.1 too
    return found


class Terminal:
    """A child process on a pseudo-terminal: what a user types, what they see."""

    def __init__(self, argv: list[str], env: dict[str, str]):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal
            os.execve(argv[0], argv, env)
        self.seen = ""

    def expect(self, pattern: str, timeout: float = 240) -> str:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in:\n{self.seen[-3000:]}"
            ready, _, _ = select.select([self.fd], [], [], min(left, 1))
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536).decode(errors="replace").replace("\r\n", "\n")
                except OSError:  # the child closed the terminal
                    assert re.search(pattern, self.seen), self.seen[-3000:]
        match = re.search(pattern, self.seen)
        seen, self.seen = self.seen[:match.end()], self.seen[match.end():]
        return seen

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 65536)
            except OSError:
                pass
            time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("the shell did not exit")


def test_sql_shell_on_a_terminal(tmp_path):
    make_topic(tmp_path, 1)
    history = tmp_path / "history"
    env = {**os.environ, "TOPICLAKE_SQL_HISTORY": str(history), "TERM": "dumb"}
    env.pop("SPARK_LOCAL_IP", None)  # the Spark UI listens on loopback unless told otherwise
    shell = Terminal([sys.executable, "-m", "topiclake.cli", "sql", "--data", str(tmp_path), "--master",
                      "local[1]"], env)
    try:
        banner = shell.expect(r"topiclake> ")
        ui = re.search(r"Spark UI: http://(?:localhost|127\.0\.0\.1):(\d+)", banner)
        assert ui, banner
        assert listening_addresses(int(ui.group(1))) == {"127.0.0.1"}
        shell.send("SELECT 6 * 7\n")  # no `;` yet: the statement goes on
        shell.expect(r"-> ")
        shell.send("  AS answer;\n")
        seen = shell.expect(r"topiclake> ")
        assert re.search(r"answer\n-+\n42\n\(1 row\)\n\(\d+\.\d\d s\)", seen), seen
        assert "Traceback" not in seen and "INFO" not in seen

        shell.send("SELECT max(hash(id)) FROM range(0, 100000000000, 1, 1);\n")  # minutes of work
        time.sleep(3)
        shell.send("\x03")  # Ctrl-C: cancels the query, not the shell
        seen = shell.expect(r"topiclake> ", timeout=120)
        assert "query cancelled" in seen and "Traceback" not in seen, seen

        shell.send("SELECT * FROM nowhere;\n")
        seen = shell.expect(r"topiclake> ")
        assert re.search(r"error: \[TABLE_OR_VIEW_NOT_FOUND\].*\(line 1, pos 14\)", seen), seen

        shell.send("exit\n")
        assert shell.wait() == 0
    finally:
        try:
            os.kill(shell.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    saved = [line.replace("\\040", " ") for line in history.read_text().splitlines()]  # libedit escapes spaces
    assert "SELECT 6 * 7 AS answer;" in saved  # a statement typed over two lines is one history entry
    assert any("range(0, 100000000000" in line for line in saved)
