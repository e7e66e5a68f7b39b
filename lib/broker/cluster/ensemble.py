"""A ZooKeeper ensemble on loopback (1 or 3 nodes) for tests, benchmarks and a developer's machine.

ZooKeeper comes from Debian's `zookeeper` package (3.8): its jar's manifest names the server's
whole runtime class path, so `java -cp zookeeper.jar QuorumPeerMain zoo.cfg` starts a server.
(Maven Central's 3.9.5 jars were tried too: the POM is the client's view, so a server built
from `mvn dependency:copy-dependencies` dies with NoClassDefFoundError on metrics-core, and
every such runtime jar would have to be listed by hand. docs/CLUSTER.md has the comparison.)

Each node gets free loopback ports (client, quorum, election), a data dir `<base>/node-<id>`,
tickTime 200 ms (sessions of 0.4-4 s can be negotiated), and the four-letter words. A node is
ready when `srvr` answers with a Mode (standalone, leader or follower): `ruok` answers `imok`
before a quorum member serves anything. `ensemble.json` in the base dir records the pids and
ports, so `bin/zookeeper stop DIR` from another process stops what `start` began, and one node
stopped and started again (`stop_node`, `start_node`) comes back on the same ports with the same
data: its peers and the brokers' connect string still name it (`ensemble_cli` is the command).

Processes are stopped by their own pid only (never by name).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

CLASSPATH_ENV = "TOPICLAKE_ZOOKEEPER_CLASSPATH"
# slf4j-simple (a dependency of Debian's libzookeeper-java) makes the server log to stderr,
# which goes to the node's server.log; without a binding it logs nothing at all.
DEFAULT_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
STATE_FILE = "ensemble.json"
SERVING_MODES = ("standalone", "leader", "follower")
# Small heap, fast start: a test ensemble holds a few thousand znodes on a 2-core machine.
JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
               "-Djava.net.preferIPv4Stack=true", "-Dzookeeper.admin.enableServer=false",
               # quorum connections to a dead peer give up after 1 s instead of 5 (faster re-election)
               "-Dzookeeper.cnxTimeout=1000",
               "-Dorg.slf4j.simpleLogger.showDateTime=true",
               "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS")


class EnsembleError(RuntimeError):
    """ZooKeeper is not installed, a node did not start, or a node is unknown."""


def classpath() -> str:
    value = os.environ.get(CLASSPATH_ENV, DEFAULT_CLASSPATH)
    jar = value.split(":")[0]
    if not Path(jar).is_file():
        raise EnsembleError(f"ZooKeeper is not installed ({jar} not found): run `apt-get install zookeeper` "
                            f"as root (bin/_env.sh does), or set {CLASSPATH_ENV}")
    return value


def four_letter_word(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """A four-letter-word command's answer ("" when the node does not answer)."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(word.encode())
            conn.shutdown(socket.SHUT_WR)
            chunks = []
            while chunk := conn.recv(4096):
                chunks.append(chunk)
    except OSError:
        return ""
    return b"".join(chunks).decode("utf-8", "replace")


def node_answers(host: str, port: int) -> bool:
    """Whether the node's client port answers `ruok` (it may not serve yet: see node_mode)."""
    return four_letter_word(host, port, "ruok") == "imok"


def node_mode(host: str, port: int) -> str | None:
    """standalone, leader or follower while the node serves; None otherwise."""
    for line in four_letter_word(host, port, "srvr").splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def _free_ports(count: int, host: str) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass
class ZooKeeperNode:
    node_id: int
    client_port: int
    quorum_port: int
    election_port: int
    data_dir: Path
    pid: int | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def config_path(self) -> Path:
        return self.data_dir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "server.log"

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True


class Ensemble:
    """`size` ZooKeeper servers on `host`, data under `base_dir`. Use as a context manager or
    call start()/stop(). kill()/restart() act on one node (by its 1-based id)."""

    def __init__(self, base_dir: str | os.PathLike, size: int = 1, *, tick_ms: int = 200,
                 host: str = "127.0.0.1", client_port: int | None = None):
        """`client_port`: node N serves clients on client_port + N - 1 (a connect string known
        in advance, for configuration files); free ports otherwise."""
        if size < 1:
            raise EnsembleError(f"an ensemble needs at least one node, not {size}")
        self.base_dir = Path(base_dir).absolute()  # zoo.cfg's dataDir must not depend on a cwd
        self.size = size
        self.tick_ms = tick_ms
        self.host = host
        self.client_port = client_port
        self.nodes: dict[int, ZooKeeperNode] = {}

    # ---- life cycle -------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "Ensemble":
        cp = classpath()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        ports = _free_ports(3 * self.size, self.host)
        for node_id in range(1, self.size + 1):
            client, quorum, election = ports[3 * (node_id - 1): 3 * node_id]
            if self.client_port is not None:
                client = self.client_port + node_id - 1
            self.nodes[node_id] = ZooKeeperNode(node_id, client, quorum, election, self.base_dir / f"node-{node_id}")
        for node in self.nodes.values():
            self._write_config(node)
        try:
            for node in self.nodes.values():
                self._launch(node, cp)
            self._save_state()
            self.wait_serving(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """SIGTERM every node, SIGKILL what is still running after 5 s."""
        for node in self.nodes.values():
            _signal(node, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for node in self.nodes.values():
            while node.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            if node.running():
                _signal(node, signal.SIGKILL)
            _reap(node)
        (self.base_dir / STATE_FILE).unlink(missing_ok=True)

    def __enter__(self) -> "Ensemble":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- one node ---------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """kill -9 one node (its data dir stays, restart() brings it back)."""
        node = self._node(node_id)
        _signal(node, signal.SIGKILL)
        _reap(node)

    def restart(self, node_id: int, timeout: float = 60.0) -> None:
        node = self._node(node_id)
        if node.running():
            self.kill(node_id)
        self._launch(node, classpath())
        self._save_state()
        self._wait(lambda: node_mode(self.host, node.client_port) in SERVING_MODES, timeout,
                   f"ZooKeeper node {node_id} did not serve again", [node])

    def stop_node(self, node_id: int) -> None:
        """Stop one node (SIGTERM, SIGKILL after 5 s); its ports and data stay recorded."""
        node = self._node(node_id)
        _signal(node, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while node.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if node.running():
            _signal(node, signal.SIGKILL)
        _reap(node)
        node.pid, node.process = None, None
        self._save_state()

    def start_node(self, node_id: int, timeout: float = 60.0) -> None:
        """Start one stopped node on its recorded ports and data, and wait until it answers
        `ruok` (it serves once a quorum of the ensemble runs: `node_mode` then names its mode)."""
        node = self._node(node_id)
        if node.running():
            raise EnsembleError(f"ZooKeeper node {node_id} is running already (pid {node.pid})")
        self._launch(node, classpath())
        self._save_state()
        self._wait(lambda: node_answers(self.host, node.client_port), timeout,
                   f"ZooKeeper node {node_id} did not answer", [node])

    def leader_id(self) -> int | None:
        for node_id, node in self.nodes.items():
            if node_mode(self.host, node.client_port) in ("leader", "standalone"):
                return node_id
        return None

    # ---- addresses --------------------------------------------------------------------------

    @property
    def connect_string(self) -> str:
        """`host:port,host:port,...` for a ZooKeeper client (kazoo's `hosts`)."""
        return ",".join(f"{self.host}:{node.client_port}" for node in self.nodes.values())

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Until every running node serves (a quorum formed)."""
        running = [n for n in self.nodes.values() if n.running()]
        self._wait(lambda: all(node_mode(self.host, n.client_port) in SERVING_MODES for n in running), timeout,
                   "ZooKeeper did not start serving", running)

    # ---- internals --------------------------------------------------------------------------

    def _node(self, node_id: int) -> ZooKeeperNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise EnsembleError(f"no ZooKeeper node {node_id} (nodes: {sorted(self.nodes)})") from None

    def _write_config(self, node: ZooKeeperNode) -> None:
        node.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"tickTime={self.tick_ms}", "initLimit=10", "syncLimit=5",
                 f"dataDir={node.data_dir}", f"clientPort={node.client_port}",
                 f"clientPortAddress={self.host}", "4lw.commands.whitelist=*", "admin.enableServer=false",
                 "maxClientCnxns=0"]
        if self.size > 1:
            (node.data_dir / "myid").write_text(f"{node.node_id}\n")
            lines += [f"server.{n.node_id}={self.host}:{n.quorum_port}:{n.election_port}"
                      for n in self.nodes.values()]
        node.config_path.write_text("\n".join(lines) + "\n")

    def _launch(self, node: ZooKeeperNode, cp: str) -> None:
        with open(node.log_path, "ab") as log:
            node.process = subprocess.Popen(["java", *JVM_OPTIONS, "-cp", cp, MAIN_CLASS, str(node.config_path)],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)  # a Ctrl-C of the caller is not theirs
        node.pid = node.process.pid

    def _wait(self, ready, timeout: float, what: str, nodes: list[ZooKeeperNode]) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n in nodes if not n.running()]
            if dead or time.monotonic() > deadline:
                node = dead[0] if dead else nodes[0]
                tail = node.log_path.read_text(errors="replace").strip().splitlines()[-15:] \
                    if node.log_path.exists() else []
                reason = f"node {node.node_id} exited" if dead else f"timed out after {timeout:.0f} s"
                raise EnsembleError(f"{what} ({reason}); last lines of {node.log_path}:\n" + "\n".join(tail))
            time.sleep(0.05)

    def _save_state(self) -> None:
        state = {"host": self.host, "tick_ms": self.tick_ms, "connect": self.connect_string,
                 "nodes": {str(n.node_id): {"pid": n.pid, "client_port": n.client_port,
                                            "quorum_port": n.quorum_port, "election_port": n.election_port}
                           for n in self.nodes.values()}}
        (self.base_dir / STATE_FILE).write_text(json.dumps(state, indent=1) + "\n")

    @classmethod
    def attach(cls, base_dir: str | os.PathLike) -> "Ensemble":
        """The ensemble a `start` (possibly of another process) recorded in `base_dir`."""
        base_dir = Path(base_dir)
        try:
            state = json.loads((base_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            raise EnsembleError(f"no ZooKeeper ensemble recorded in {base_dir}") from None
        ensemble = cls(base_dir, len(state["nodes"]), tick_ms=state["tick_ms"], host=state["host"])
        for key, node in state["nodes"].items():
            node_id = int(key)
            ensemble.nodes[node_id] = ZooKeeperNode(node_id, node["client_port"], node["quorum_port"],
                                                    node["election_port"], base_dir / f"node-{node_id}",
                                                    pid=node.get("pid"))
        return ensemble


def _signal(node: ZooKeeperNode, sig: int) -> None:
    if node.running() and node.pid is not None:
        try:
            os.kill(node.pid, sig)
        except ProcessLookupError:
            pass


def _reap(node: ZooKeeperNode) -> None:
    if node.process is not None:
        try:
            node.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    else:  # attached from the state file: not our child, wait for it to go
        deadline = time.monotonic() + 10
        while node.running() and time.monotonic() < deadline:
            time.sleep(0.05)
