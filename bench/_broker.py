"""Start/stop a real `topiclake broker start` process for the benchmarks."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_broker(data: Path | None = None, *extra_args: str, root: str | None = None):
    """Yields (bootstrap, data_dir, pid); the broker gets SIGTERM at the end. `extra_args`: more
    `topiclake broker start` flags. `root`: a URL root (s3://...) as --data instead of `data`
    (then the cache directory's parent: the log goes there)."""
    with contextlib.ExitStack() as stack:
        if data is None:
            data = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="topiclake-bench-"))) / "data"
        port = _free_port()
        log = open(data.parent / "broker.log", "ab")
        proc = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "broker", "start", "--port", str(port),
                                 "--data", root or str(data), "--log-level", "WARNING", *extra_args],
                                stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            deadline = time.monotonic() + 60  # a bucket root takes its partitions over first
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        output = (data.parent / "broker.log").read_text()
                        raise RuntimeError(f"broker did not start: {output}") from None
                    time.sleep(0.05)
            yield f"127.0.0.1:{port}", data, proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            log.close()


@contextlib.contextmanager
def running_cluster(brokers: int = 3):
    """Yields (bootstrap, data_dir, pids) of `brokers` broker processes in cluster mode on one
    root with a one-node ZooKeeper (tests/support/cluster_brokers.py; stopped cleanly at the end)."""
    sys.path.insert(0, str(REPO))
    from topiclake.broker.cluster.ensemble import Ensemble
    from tests.support.cluster_brokers import ClusterBrokers, cluster_settings

    with tempfile.TemporaryDirectory(prefix="topiclake-bench-cluster-") as tmp:
        with Ensemble(Path(tmp) / "zookeeper", 1) as ensemble:
            settings = cluster_settings(ensemble.connect_string, "/bench", internal_partitions=10)
            with ClusterBrokers(Path(tmp), settings, brokers, log_level="WARNING") as cluster:
                yield cluster.bootstrap, cluster.root, [b.proc.pid for b in cluster.brokers.values()]


def create_topic(bootstrap: str, name: str, partitions: int = 1, **config: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=config)]).values():
        future.result(10)


def cpu_seconds(pid: int | list[int]) -> float:
    """User + system CPU time of a process (or of several, summed) so far (Linux /proc)."""
    total = 0.0
    for one in pid if isinstance(pid, list) else [pid]:
        fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


@contextlib.contextmanager
def mock_cluster():
    """Yields the bootstrap of librdkafka's in-process mock cluster (C, in memory, no disk): a
    near no-op broker. A client run against it in the same run measures what the Python client
    loop alone can do on this machine, so a broker number is read against the client's limit."""
    from confluent_kafka import Producer

    handle = Producer({"test.mock.num.brokers": 1})  # the cluster lives as long as this handle
    broker = next(iter(handle.list_topics(timeout=10).brokers.values()))
    try:
        yield f"{broker.host}:{broker.port}"
    finally:
        handle.flush(5)
