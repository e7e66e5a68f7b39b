"""The coordination interface a broker uses in cluster mode, and the records it exchanges.

Kafka on ZooKeeper kept four registries there (Kafka's KafkaZkClient and its znodes): live brokers
(`/brokers/ids`, ephemeral), the controller (`/controller`, ephemeral, fenced by the persistent
`/controller_epoch`), each partition's leader and leader epoch (`.../partitions/<p>/state`, changed
only by compare-and-set), and change notifications (`/config/changes`, `/kafka-acl-changes`).
This interface offers the same, small enough that another store (etcd: leases, transactions on
mod revisions, watches) could serve it; `zookeeper.ZooKeeperCoordination` is the real one and
`single.SingleBrokerCoordination` the one-broker one (it leads everything at epoch 0: today's behaviour).

Threads: methods block (a ZooKeeper round trip is about 2 ms on loopback); call them from a
worker thread, not the event loop. Callbacks never run on the client library's own thread: they
run in order on one `EventDispatcher` thread (or through a `dispatch` function the broker gives,
e.g. `loop.call_soon_threadsafe`), so a slow callback cannot stall session keep-alives.

Fencing rule (docs/CLUSTER.md): the version of an ephemeral znode restarts at 0 when it is
deleted and created again, so it fences nothing. Partition state lives in persistent znodes
changed only by compare-and-set on their version, and a controller's writes also check the
version of the persistent `/controller_epoch` it raised when it was elected.
"""

from __future__ import annotations

import abc
import enum
import json
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, TypeVar

from topiclake.segments.errors import TopiclakeError

log = logging.getLogger(__name__)

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
T = TypeVar("T")


class CoordinationError(TopiclakeError):
    """The coordination service cannot be reached or answered something unexpected."""


class StaleVersionError(CoordinationError):
    """A compare-and-set lost: the state changed since the version the caller read."""


class NotControllerError(CoordinationError):
    """A write carried a controller token that is no longer the current controller's."""


class NodeExistsError(CoordinationError):
    """Something created exclusively (a topic, a partition state) exists already."""


class BrokerIdInUseError(CoordinationError):
    """Another live session holds this broker id's registration."""


class SessionState(enum.Enum):
    """CONNECTED: act. SUSPENDED: the connection is lost, the session may live on: a broker keeps
    serving the partitions it leads (each acknowledgement is guarded by the partition's fence in
    storage, which a newer leader's claim moves, not by ZooKeeper; docs/CLUSTER.md), and changes
    of cluster state wait for the connection. LOST: the session expired: every ephemeral node of
    this broker is gone and others may have taken over (the implementation registers again, and
    the broker must reload its view of the cluster before acting)."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker's registration (Kafka's /brokers/ids/<id> JSON, version 5)."""

    broker_id: int
    host: str
    port: int
    endpoints: tuple[str, ...] = ()  # "PLAINTEXT://host:port", one per advertised listener
    rack: str | None = None

    def to_json(self) -> bytes:
        endpoints = list(self.endpoints) or [f"PLAINTEXT://{self.host}:{self.port}"]
        protocols = {e.split("://", 1)[0]: e.split("://", 1)[0] for e in endpoints}
        return json.dumps({"version": 5, "host": self.host, "port": self.port, "endpoints": endpoints,
                           "listener_security_protocol_map": protocols, "rack": self.rack, "jmx_port": -1,
                           "timestamp": str(int(time.time() * 1000))}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, broker_id: int, data: bytes) -> "BrokerInfo":
        value = _json_object(data, f"broker {broker_id} registration")
        return cls(broker_id, value.get("host", ""), int(value.get("port", -1)),
                   tuple(value.get("endpoints", ())), value.get("rack"))


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's leadership (Kafka's LeaderAndIsr znode): `replicas` in preferred order
    (the first live one should lead), `controller_epoch` of the controller that wrote it."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    controller_epoch: int = 0

    def to_json(self) -> bytes:
        return json.dumps({"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch,
                           "isr": list(self.replicas), "controller_epoch": self.controller_epoch}).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "partition state") -> "PartitionState":
        value = _json_object(data, where)
        try:
            return cls(int(value["leader"]), int(value["leader_epoch"]), tuple(int(r) for r in value.get("isr", ())),
                       int(value.get("controller_epoch", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise CoordinationError(f"malformed {where}: {exc!r}") from None

    def led_by(self, broker_id: int, epoch: int) -> "PartitionState":
        return PartitionState(broker_id, epoch, self.replicas, self.controller_epoch)


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    """A value with the version a compare-and-set must name to replace it. `created` tells one
    incarnation of the value from another (ZooKeeper: the node's creation zxid): a deleted and
    re-created node starts again at version 0, which is newer, not older."""

    value: T
    version: int
    created: int = 0

    def is_older_than(self, other: "Versioned[T]") -> bool:
        """Whether this is an earlier version of the same incarnation as `other`."""
        return self.created == other.created and self.version < other.version


@dataclass(frozen=True, slots=True)
class ControllerToken:
    """Proof of election: `epoch` is the controller epoch this broker raised; `fence` is what the
    store checks on each of its writes (ZooKeeper: /controller_epoch's znode version)."""

    broker_id: int
    epoch: int
    fence: int


@dataclass(frozen=True, slots=True)
class Change:
    """One notification of an area's change log (topics, configs, acls, ...), in order."""

    area: str
    sequence: int
    payload: Mapping[str, Any] = field(default_factory=dict)


TopicPartition = tuple[str, int]
Callback = Callable[..., None]


class EventDispatcher:
    """Runs callbacks in order on one daemon thread; an exception is logged, never fatal."""

    def __init__(self, name: str = "coordination-events"):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def __call__(self, fn: Callable[[], None]) -> None:
        self._queue.put(fn)

    def close(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(5)

    def _run(self) -> None:
        while (fn := self._queue.get()) is not None:
            try:
                fn()
            except CoordinationError as exc:  # the session is lost or suspended: a later event retries
                log.warning("coordination callback not run: %s", exc)
            except Exception:
                log.exception("coordination callback failed")


class Coordination(abc.ABC):
    """What a broker needs from the cluster's coordination service. Watches call back with the
    full current value (never a diff), first right away, then on every change."""

    broker_id: int

    # ---- life cycle and session -------------------------------------------------------------

    @abc.abstractmethod
    def start(self) -> None:
        """Connect (raising CoordinationError with the address if that fails)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Leave: ephemeral registrations go at once, the controller role is given up."""

    @property
    @abc.abstractmethod
    def session_state(self) -> SessionState: ...

    @abc.abstractmethod
    def add_session_listener(self, callback: Callable[[SessionState], None]) -> None:
        """`callback(state)` on every change of the session state."""

    # ---- live brokers -----------------------------------------------------------------------

    @abc.abstractmethod
    def register_broker(self, info: BrokerInfo) -> None:
        """Register this broker while its session lives (again after a lost session). Raises
        BrokerIdInUseError if another live session holds the id after a session timeout."""

    @abc.abstractmethod
    def live_brokers(self) -> dict[int, BrokerInfo]: ...

    @abc.abstractmethod
    def watch_brokers(self, callback: Callable[[dict[int, BrokerInfo]], None]) -> None: ...

    # ---- the controller ---------------------------------------------------------------------

    @abc.abstractmethod
    def campaign(self, on_elected: Callable[[ControllerToken], None], on_resigned: Callable[[], None]) -> None:
        """Stand for controller now and whenever the seat is free; `on_elected(token)` when this
        broker wins (the controller epoch raised), `on_resigned()` when it stops being it."""

    @abc.abstractmethod
    def controller(self) -> tuple[int, int] | None:
        """(broker id, controller epoch) of the current controller, None while there is none."""

    @abc.abstractmethod
    def watch_controller(self, callback: Callable[[tuple[int, int] | None], None]) -> None: ...

    # ---- partitions -------------------------------------------------------------------------

    @abc.abstractmethod
    def create_topic(self, topic: str, partitions: Mapping[int, PartitionState],
                     token: ControllerToken | None = None) -> None:
        """Create a topic's partition states at once (NodeExistsError if the topic exists)."""

    @abc.abstractmethod
    def add_partitions(self, topic: str, partitions: Mapping[int, PartitionState]) -> None:
        """Create the states of a topic's new partitions (NodeExistsError if one exists)."""

    @abc.abstractmethod
    def delete_topic(self, topic: str) -> None:
        """Remove a topic and its partition states (no-op if it does not exist)."""

    @abc.abstractmethod
    def topics(self) -> list[str]: ...

    @abc.abstractmethod
    def watch_topics(self, callback: Callable[[list[str]], None]) -> None: ...

    @abc.abstractmethod
    def watch_partitions(self, topic: str, callback: Callable[[list[int]], None]) -> None:
        """The topic's partition numbers now and after every change (CreatePartitions on any
        broker adds some; the topic list does not change then)."""

    @abc.abstractmethod
    def partition_states(self, topic: str) -> dict[int, Versioned[PartitionState]]: ...

    @abc.abstractmethod
    def partition_state(self, topic: str, partition: int) -> Versioned[PartitionState] | None: ...

    @abc.abstractmethod
    def set_partition_state(self, topic: str, partition: int, state: PartitionState, expected_version: int,
                            token: ControllerToken | None = None) -> Versioned[PartitionState]:
        """Compare-and-set: replace the state only if its version is still `expected_version`
        (StaleVersionError otherwise) and, with a token, only while that controller is current
        (NotControllerError otherwise). Returns the new state and version."""

    @abc.abstractmethod
    def watch_partition_state(self, topic: str, partition: int,
                              callback: Callable[[Versioned[PartitionState] | None], None]) -> None: ...

    # ---- change notifications ---------------------------------------------------------------

    @abc.abstractmethod
    def publish_change(self, area: str, payload: Mapping[str, Any]) -> int:
        """Append a notification to `area`'s change log; returns its sequence number."""

    @abc.abstractmethod
    def watch_changes(self, area: str, callback: Callable[[Change], None], *, after: int | None = None) -> int:
        """Deliver every change of `area` after sequence `after` (None: from now on) to
        `callback`, in order, exactly once per watcher while the session lives. Returns the last
        sequence that existed when the watch began (-1 for none). After a LOST session, reload
        the whole state: notifications older than the retention may be gone."""


def _json_object(data: bytes | None, where: str) -> dict:
    try:
        value = json.loads(data or b"{}")
    except ValueError:
        raise CoordinationError(f"malformed {where}: not JSON") from None
    if not isinstance(value, dict):
        raise CoordinationError(f"malformed {where}: not a JSON object")
    return value
