"""One writer per storage root (issue 10): a second broker on a root a live broker owns refuses to
start, naming the owner, and changes nothing; a broker killed with -9 leaves no lock behind, so a
restart takes over with no manual step and every acknowledged record is still there."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess, free_port
from tests.support.clients import consume_all
from topiclake.segments import ownership
from topiclake.segments.filenames import CLEAN_SHUTDOWN_FILE

pytestmark = pytest.mark.slow


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    from confluent_kafka import Producer

    offsets, errors = [], []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 1})
    for value in values:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, msg: errors.append(err) if err else offsets.append(msg.offset()))
    assert producer.flush(30) == 0
    assert not errors, errors
    return offsets


def start_second(data, port: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "topiclake.cli", "broker", "start", "--port", str(port), "--data", str(data),
         "--config", str(REPO / "conf" / "topiclake.toml")],
        capture_output=True, text=True, timeout=60, cwd=REPO)


def test_second_broker_refuses_and_first_keeps_every_acknowledged_write(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    try:
        before = produce(first.bootstrap, "t", [b"a%d" % i for i in range(200)])
        markers_before = sorted(p.parent.name for p in (data / "log").glob(f"*/{CLEAN_SHUTDOWN_FILE}"))

        second = start_second(data, free_port())

        assert second.returncode == 1
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert "in use by broker 0" in lines[0] and f"pid {first.proc.pid}" in lines[0]
        assert f"127.0.0.1:{first.port}" in lines[0]
        assert "Traceback" not in second.stderr + second.stdout
        # The refused broker opened nothing: no clean-shutdown markers, the registration is the first's.
        assert sorted(p.parent.name for p in (data / "log").glob(f"*/{CLEAN_SHUTDOWN_FILE}")) == markers_before
        assert f'"pid": {first.proc.pid}' in (data / "cluster" / "brokers" / "0.json").read_text()

        after = produce(first.bootstrap, "t", [b"b%d" % i for i in range(200)])
        assert after[0] == before[-1] + 1
        records = consume_all(first.bootstrap, "t", 400)
        assert [v for _, v in records] == [b"a%d" % i for i in range(200)] + [b"b%d" % i for i in range(200)]
    finally:
        first.stop()


def test_restart_after_kill_9_takes_over_the_root(tmp_path):
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    acked = produce(first.bootstrap, "t", [b"v%d" % i for i in range(100)])
    assert ownership.owner_of(data)["pid"] == first.proc.pid
    first.kill()
    assert ownership.owner_of(data) is None  # the kernel dropped the dead process's lock

    restarted = BrokerProcess(data, first.port).start()
    try:
        assert ownership.owner_of(data)["pid"] == restarted.proc.pid
        records = consume_all(restarted.bootstrap, "t", len(acked))
        assert [offset for offset, _ in records] == acked
    finally:
        assert restarted.stop() == 0
    assert ownership.owner_of(data) is None  # a clean stop releases the root


def test_lock_in_one_process(tmp_path):
    lock = ownership.acquire(tmp_path, broker_id=3, host="127.0.0.1")
    try:
        lock.update_owner(port=9999)
        with pytest.raises(ownership.StorageRootInUseError, match="broker 3 pid .* serving 127.0.0.1:9999"):
            ownership.acquire(tmp_path, broker_id=4)
        assert ownership.owner_of(tmp_path)["port"] == 9999
        # Another process sees the same owner through the lock (F_GETLK), not through our memory.
        probe = subprocess.run([sys.executable, "-c", "import sys; from topiclake.segments import ownership; "
                                "print(ownership.owner_of(sys.argv[1]))", str(tmp_path)],
                               capture_output=True, text=True, check=True)
        assert f"'pid': {os.getpid()}" in probe.stdout and "'port': 9999" in probe.stdout
    finally:
        lock.release()
    assert ownership.owner_of(tmp_path) is None
    ownership.acquire(tmp_path).release()  # free again


def test_root_that_is_a_file_is_one_line(tmp_path):
    data = tmp_path / "not-a-dir"
    data.write_text("x")
    with pytest.raises(ownership.StorageRootNotWritableError, match="not a directory"):
        ownership.acquire(data)
    started = time.monotonic()
    result = start_second(data, free_port())
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "not a directory" in result.stderr
    assert time.monotonic() - started < 30
