"""Real `topiclake broker start` processes in cluster mode on one shared storage root, for the
cluster tests, benchmarks and the soak: start, kill -9, SIGSTOP/SIGCONT and restart one broker,
and ask any live one who leads what (Metadata over the wire, as a client would)."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

from tests.support.broker_process import BrokerProcess, free_port
from tests.support.waits import wait_for

# Short enough that a test's failover takes a few seconds; ZooKeeper's tick of 200 ms allows it.
SESSION_TIMEOUT_MS = 1000
PREFERRED_LEADER_DELAY_MS = 1000
# Small internal topics: every partition is a takeover on failover.
INTERNAL_PARTITIONS = 6


def cluster_settings(zookeeper: str, chroot: str, *, session_timeout_ms: int = SESSION_TIMEOUT_MS,
                     preferred_leader_delay_ms: int = PREFERRED_LEADER_DELAY_MS,
                     internal_partitions: int = INTERNAL_PARTITIONS,
                     extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """The settings every broker of a test cluster shares (Kafka's test-broker group timings)."""
    settings: dict[str, dict[str, Any]] = {
        "broker": {"num_partitions": 4},
        "groups": {"min_session_timeout_ms": 1000, "initial_rebalance_delay_ms": 0,
                   "offsets_topic_partitions": internal_partitions},
        "transactions": {"state_topic_partitions": internal_partitions},
        "share": {"state_topic_partitions": internal_partitions},
        "cluster": {"zookeeper": zookeeper, "chroot": chroot, "session_timeout_ms": session_timeout_ms,
                    "preferred_leader_delay_ms": preferred_leader_delay_ms},
    }
    for name, values in (extra or {}).items():
        settings.setdefault(name, {}).update(values)
    return settings


def write_toml(path: Path, settings: Mapping[str, Mapping[str, Any]]) -> Path:
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(item) for item in v) + "]"
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = []
    for name, values in settings.items():
        lines.append(f"[{name}]")
        lines.extend(f"{key} = {value(v)}" for key, v in values.items())
        lines.append("")
    path.write_text("\n".join(lines))
    return path


class ClusterBrokers:
    """`count` brokers (ids 1..count) on `root`, each with its own port and log file."""

    def __init__(self, work: Path, settings: Mapping[str, Mapping[str, Any]], count: int = 3, *,
                 root: Path | None = None, log_level: str = "INFO", bucket: str | None = None):
        """`bucket`: a bucket root URL (s3://...) instead of a directory, each broker with its own
        cache directory `<work>/cache-<id>`."""
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.root = root or self.work / "data"
        self.settings = settings
        self.config = write_toml(self.work / "cluster.toml", settings)

        def broker(broker_id: int) -> BrokerProcess:
            args = ("--broker-id", str(broker_id), "--log-level", log_level)
            if bucket is not None:
                args += ("--cache-dir", str(self.work / f"cache-{broker_id}"))
            return BrokerProcess(self.root, free_port(), log_path=self.work / f"broker-{broker_id}.log",
                                 config=self.config, args=args, root=bucket)

        self.brokers: dict[int, BrokerProcess] = {broker_id: broker(broker_id) for broker_id in range(1, count + 1)}
        self.paused: set[int] = set()

    def start(self, timeout: float = 60.0) -> "ClusterBrokers":
        """Start every broker at once (each takes seconds to import and bind, mostly CPU)."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            started = [pool.submit(b.start, timeout) for b in self.brokers.values()]
        try:
            for future in started:
                future.result()
            self.wait_whole(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_whole(self, timeout: float = 60.0) -> None:
        """Until every live broker lists every live broker: a broker answers once it has bound its
        port, and hears the others' ZooKeeper registrations a moment later."""
        from tests.support.cluster_clients import metadata

        def sees_all() -> bool:
            live = set(self.live())
            try:
                return all(metadata(self.bootstrap_of(i), "__whole").brokers >= live for i in live)
            except (OSError, ConnectionError):
                return False

        wait_for(sees_all, timeout, 0.2, what="every live broker to list the others", detail=self.logs)

    @property
    def bootstrap(self) -> str:
        """Every broker, so a client finds the cluster whichever one is down."""
        return ",".join(b.bootstrap for b in self.brokers.values())

    def bootstrap_of(self, broker_id: int) -> str:
        return self.brokers[broker_id].bootstrap

    def live(self) -> list[int]:
        return [i for i, b in self.brokers.items()
                if b.proc is not None and b.proc.poll() is None and i not in self.paused]

    def kill(self, broker_id: int) -> float:
        """kill -9; the monotonic time of the kill."""
        self.resume(broker_id)
        at = time.monotonic()
        self.brokers[broker_id].kill()
        return at

    def restart(self, broker_id: int, timeout: float = 60.0) -> None:
        broker = self.brokers[broker_id]
        if broker.proc is not None and broker.proc.poll() is None:
            self.kill(broker_id)
        broker.start(timeout)
        self.wait_whole(timeout)

    def pause(self, broker_id: int) -> float:
        """SIGSTOP: the process is frozen (its ZooKeeper session expires, its sockets stay open)."""
        os.kill(self.brokers[broker_id].proc.pid, signal.SIGSTOP)
        self.paused.add(broker_id)
        return time.monotonic()

    def resume(self, broker_id: int) -> None:
        if broker_id in self.paused:
            os.kill(self.brokers[broker_id].proc.pid, signal.SIGCONT)
            self.paused.discard(broker_id)

    def make_whole(self) -> None:
        """After a test's faults: every paused broker resumed, every dead one restarted."""
        for broker_id in list(self.paused):
            self.resume(broker_id)
        for broker_id, broker in self.brokers.items():
            if broker.proc.poll() is not None:
                self.restart(broker_id)

    def stop(self) -> None:
        for broker_id in list(self.paused):
            self.resume(broker_id)
        for broker in self.brokers.values():
            if broker.proc is not None and broker.proc.poll() is None:
                try:
                    broker.stop(30)
                except Exception:  # noqa: BLE001  (a broker that does not stop in time is killed)
                    broker.kill()

    def zookeeper_controller(self) -> tuple[int, int] | None:
        """(broker id, controller epoch) as ZooKeeper's /controller names it now; None: no controller."""
        import json

        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError

        cluster = self.settings["cluster"]
        client = KazooClient(hosts=cluster["zookeeper"])
        client.start(timeout=10)
        try:
            data, _ = client.get(f"{cluster['chroot']}/controller")
        except NoNodeError:
            return None
        finally:
            client.stop()
            client.close()
        value = json.loads(data)
        return int(value["brokerid"]), int(value["epoch"])

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log()[-2500:]}" for i, b in self.brokers.items())

    def __enter__(self) -> "ClusterBrokers":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
