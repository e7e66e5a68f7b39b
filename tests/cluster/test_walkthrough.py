"""README's "Run a 3-broker cluster", run as written: the commands between its walkthrough
markers, with conf/cluster-*.toml, on free ports instead of 2181-2183, 9092-9094 and 9404-9406
(the same text otherwise), then what they printed checked: replicas with the preferred broker
first, the failover as our `topics describe` and Kafka's kafka-topics tell it, the quorum's
leader, every record read back, the controller's metrics."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import pytest

from topiclake.broker.cluster.ensemble import Ensemble, EnsembleError

from tests.support.paths import REPO
from tests.support.broker_process import free_port

pytestmark = pytest.mark.slow

BEGIN, END = "<!-- walkthrough: tests/cluster/test_walkthrough.py runs this block -->", "<!-- end walkthrough -->"
ZOOKEEPER_PORTS, BROKER_PORTS, METRICS_PORTS = (2181, 2182, 2183), (9092, 9093, 9094), (9404, 9405, 9406)


def walkthrough() -> str:
    readme = (REPO / "README.md").read_text()
    block = readme[readme.index(BEGIN) + len(BEGIN):readme.index(END)]
    return block.strip().removeprefix("```bash").removesuffix("```").strip() + "\n"


def consecutive_free_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports."""
    for _ in range(100):
        first = free_port()
        sockets = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                sock.bind(("127.0.0.1", port))
                sockets.append(sock)
            return first
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError("no consecutive free ports")


def on_free_ports(text: str, mapping: dict[int, int]) -> str:
    return re.sub(r"\b(\d{4})\b", lambda m: str(mapping.get(int(m.group(1)), m.group(1))), text)


def describe_blocks(out: str) -> list[dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]]:
    """Each `topics describe` / kafka-topics --describe output: partition -> (leader, replicas, isr)."""
    blocks = []
    for chunk in re.split(r"(?m)^Topic: orders\tTopicId", out)[1:]:
        blocks.append({int(m.group(1)): (int(m.group(2)), tuple(map(int, m.group(3).split(","))),
                                         tuple(map(int, m.group(4).split(",")))) for m in re.finditer(
            r"Partition: (\d+)\tLeader: (\d+)\tReplicas: ([\d,]+)\tIsr: ([\d,]+)", chunk)})
    return blocks


def test_the_readmes_cluster_walkthrough_runs_as_written(tmp_path):
    zk = consecutive_free_ports(3)
    mapping = {**{p: zk + i for i, p in enumerate(ZOOKEEPER_PORTS)},
               **{p: free_port() for p in BROKER_PORTS + METRICS_PORTS}}
    conf = tmp_path / "conf"
    conf.mkdir()
    for n in (1, 2, 3):
        (conf / f"cluster-{n}.toml").write_text(on_free_ports((REPO / "conf" / f"cluster-{n}.toml").read_text(), mapping))
    cluster = tmp_path / "cluster"
    script = on_free_ports(walkthrough(), mapping).replace("conf/cluster-", f"{conf}/cluster-") \
        .replace("/tmp/topiclake-cluster", str(cluster))
    try:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, capture_output=True, text=True,
                              timeout=900)
    finally:
        for n in (1, 2, 3):
            pid_file = cluster / f"broker-{n}.pid"
            if pid_file.exists():
                try:
                    os.kill(int(pid_file.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            Ensemble.attach(cluster / "zk").stop()
        except EnsembleError:
            pass
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    out = done.stdout
    before, after, kafka = describe_blocks(out)
    assert sorted(before) == list(range(6))
    assert all(len(replicas) == 3 and leader == replicas[0] and isr == replicas
               for leader, replicas, isr in before.values())
    assert {p: r for p, (_l, r, _i) in after.items()} == {p: r for p, (_l, r, _i) in before.items()}
    assert all(leader != 1 and isr == tuple(b for b in replicas if b != 1) and leader == isr[0]
               for leader, replicas, isr in after.values()), out
    assert kafka == after  # Kafka's kafka-topics --describe says the same
    assert re.search(r"ReplicationFactor: 3", out)
    assert re.search(r"(?m)^LeaderId:\s+[23]$", out)
    assert re.search(r"(?m)^\s*1000$", out)  # every record read back after the failover
    controllers = [float(v) for v in re.findall(r"(?m)^kafka_controller_kafkacontroller_activecontrollercount (\S+)$",
                                                out)]
    offline = [float(v) for v in re.findall(r"(?m)^kafka_controller_kafkacontroller_offlinepartitionscount (\S+)$", out)]
    assert sorted(controllers) == [0.0, 1.0] and sum(offline) == 0
