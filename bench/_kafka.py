"""Apache Kafka, the real thing, from the jars bin/fetch-peers fetches from Maven Central: where
they are, and one KRaft node (broker and controller in one process) to measure against.

The node is started as an operator would from a distribution: `kafka-storage format` with a small
generated server.properties, then `kafka-server-start` (kafka.Kafka, with Kafka's own JVM
settings). Its log is flushed as topiclake's is, by Kafka's defaults: the page cache, no fsync
per append (log.flush.interval.messages and .ms unset). The tests import `fetch_peers` too.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def fetch_peers(*peers: str) -> dict[str, str]:
    """Run bin/fetch-peers (quick once fetched) and return what it prints: KAFKA_HOME,
    KAFKA_VERSION, SPARK_KAFKA_JARS, SPARK_VERSION. `peers`: "kafka", "spark-kafka" (default both)."""
    done = subprocess.run([str(REPO / "bin" / "fetch-peers"), *peers], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise RuntimeError(f"bin/fetch-peers failed: {done.stderr.strip()}")
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_properties(log_dir: Path, port: int, controller_port: int, **overrides: str) -> str:
    """One node, both roles, loopback only; internal topics with one replica (as on one broker)."""
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        **overrides,
    }
    return "".join(f"{k}={v}\n" for k, v in settings.items())


@contextlib.contextmanager
def apache_kafka(work: Path | None = None, **overrides: str):
    """Yields (bootstrap, log_dir, pid) of a running one-node Apache Kafka; SIGTERM at the end."""
    home = Path(fetch_peers("kafka")["KAFKA_HOME"])
    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="topiclake-bench-kafka-")))
        work.mkdir(parents=True, exist_ok=True)
        port, controller_port = _free_port(), _free_port()
        log_dir = work / "kafka-logs"
        config = work / "server.properties"
        config.write_text(server_properties(log_dir, port, controller_port, **overrides))
        log_path = work / "kafka.log"
        formatted = subprocess.run([str(home / "bin" / "kafka-storage.sh"), "format", "--standalone",
                                    "--cluster-id", _cluster_id(), "--config", str(config)],
                                   capture_output=True, text=True)
        if formatted.returncode != 0:
            raise RuntimeError(f"kafka-storage format failed: {formatted.stdout}{formatted.stderr}")
        log = stack.enter_context(open(log_path, "ab"))
        proc = subprocess.Popen([str(home / "bin" / "kafka-server-start.sh"), str(config)], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_until_serving(f"127.0.0.1:{port}", proc, log_path)
            yield f"127.0.0.1:{port}", log_dir, proc.pid
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


def _cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` makes one: 16 random bytes, URL-safe base64."""
    import base64
    import uuid

    while (cid := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))[0] == "-":
        pass  # Kafka never hands out ids starting with '-' (they read as command-line options)
    return cid


def _wait_until_serving(bootstrap: str, proc: subprocess.Popen, log_path: Path, timeout: float = 90.0) -> None:
    """Until the port accepts, then until the node answers metadata with itself as a broker."""
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    admin = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"Apache Kafka exited with {proc.returncode}: {log_path.read_text()[-3000:]}")
        try:
            if admin is None:
                socket.create_connection((host, int(port)), timeout=0.5).close()
                admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise RuntimeError(f"Apache Kafka did not serve within {timeout}s: {log_path.read_text()[-3000:]}")


@contextlib.contextmanager
def both_brokers():
    """Apache Kafka and topiclake running side by side: {"kafka": (bootstrap, data, pid),
    "topiclake": (...)}. A benchmark alternates between them round by round, so a change in the
    machine's load (it is shared) hits both alike; the idle one costs next to nothing."""
    from _broker import running_broker

    with apache_kafka() as kafka, running_broker() as topiclake:
        yield {"kafka": kafka, "topiclake": topiclake}


def median_of(rounds: list[dict]) -> dict:
    """Each figure's median over the rounds."""
    import statistics

    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def runqueue_wait_seconds(pid: int) -> float:
    """Seconds the process's threads so far spent runnable but waiting for a CPU (Linux
    schedstat): what a busy machine costs a process beyond its own CPU time."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[1])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return total / 1e9


def java_consume(bootstrap: str, topic: str, records: int) -> float:
    """Records/s of Kafka's own Java consumer (kafka-consumer-perf-test, a new group from the
    earliest offsets) reading `records` of `topic`: its fetch rate, without the JVM's start and the
    group's join. The Java consumer keeps a fetch session (KIP-227) per broker, librdkafka does not."""
    import uuid

    tool = Path(fetch_peers("kafka")["KAFKA_HOME"]) / "bin" / "kafka-consumer-perf-test.sh"
    done = subprocess.run([str(tool), "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                           "--group", f"bench-{uuid.uuid4().hex[:8]}", "--timeout", "60000"],
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        raise RuntimeError(f"kafka-consumer-perf-test failed: {done.stdout[-1500:]} {done.stderr[-1500:]}")
    figures = dict(zip((h.strip() for h in lines[-2].split(",")), (v.strip() for v in lines[-1].split(","))))
    if int(figures["data.consumed.in.nMsg"]) < records:
        raise RuntimeError(f"kafka-consumer-perf-test read {figures['data.consumed.in.nMsg']} of {records} records")
    return float(figures["fetch.nMsg.sec"])
