"""The coordination interface on Apache ZooKeeper, with kazoo (pure Python).

Znodes, below the configured chroot (Kafka's layout where Kafka had one; docs/CLUSTER.md):

    /brokers/ids/<id>                        ephemeral  BrokerInfo JSON (Kafka's v5 registration)
    /controller                              ephemeral  {"version":1,"brokerid":N,"epoch":E,...}
    /controller_epoch                        persistent "E"; its znode version fences a controller
    /brokers/topics/<t>                      persistent {"version":3,"partitions":{"0":[replicas]}}
    /brokers/topics/<t>/partitions/<p>/state persistent PartitionState JSON, compare-and-set only
    /changes/<area>/change_<10 digits>       persistent sequential: one change notification each

Election is Kafka's KafkaZkClient.registerControllerAndIncrementControllerEpoch: one transaction
creates the ephemeral /controller and sets /controller_epoch to E+1 on the version it read, so
two brokers can never both win, and the winner's token names /controller_epoch's new version.
Each controller write carries that token: a transaction that checks /controller_epoch's version
beside the compare-and-set on the state, so a controller whose session expired (a zombie) cannot
write even with a fresh version of the state (Kafka's checkControllerEpoch multi-op).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from functools import partial
from typing import Any, Callable, Mapping

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, ConnectionLoss, KazooException, NodeExistsError as KazooNodeExists,
                              NoNodeError, RolledBackError)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from .config import ClusterConfig
from .kazoo_log import kazoo_logger
from .coordination import (BrokerIdInUseError, BrokerInfo, Change, Coordination, CoordinationError,
                           ControllerToken, EventDispatcher, NodeExistsError, NotControllerError, PartitionState,
                           SessionState, StaleVersionError, Versioned, _json_object)

log = logging.getLogger(__name__)

CHANGE_PREFIX = "change_"
CHANGES_KEPT = 1000  # notifications older than the newest 1000 of an area are purged
_PURGE_EVERY = 100


class OutcomeUnknownError(CoordinationError):
    """The connection failed while a write was in flight: it may or may not have happened.
    Read the state again before deciding."""


class ZooKeeperCoordination(Coordination):
    def __init__(self, config: ClusterConfig, broker_id: int, *,
                 dispatch: Callable[[Callable[[], None]], None] | None = None):
        if not config.enabled:
            raise CoordinationError("[cluster] zookeeper is not set")
        self.config = config
        self.broker_id = broker_id
        self._root = config.chroot.rstrip("/")
        self._dispatcher = EventDispatcher(f"coordination-events-{broker_id}") if dispatch is None else None
        self._dispatch = dispatch or self._dispatcher
        self._client = KazooClient(hosts=config.zookeeper, timeout=config.session_timeout_ms / 1000,
                                   connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=0.5),
                                   logger=kazoo_logger(broker_id))  # one line per connection loss, not per try
        self._state = SessionState.LOST
        self._session_listeners: list[Callable[[SessionState], None]] = []
        self._registration: BrokerInfo | None = None
        self._campaign: tuple[Callable[[ControllerToken], None], Callable[[], None]] | None = None
        self._token: ControllerToken | None = None
        self._lock = threading.RLock()
        self._published = 0
        self._closed = False

    # ---- paths ------------------------------------------------------------------------------

    def _path(self, *parts: str | int) -> str:
        return "/".join([self._root, *map(str, parts)])

    def _state_path(self, topic: str, partition: int) -> str:
        return self._path("brokers", "topics", topic, "partitions", partition, "state")

    # ---- life cycle and session -------------------------------------------------------------

    def start(self) -> None:
        self._client.add_listener(self._on_kazoo_state)
        try:
            self._client.start(timeout=self.config.connection_timeout_ms / 1000)
        except (KazooTimeoutError, KazooException) as exc:
            self._client.close()
            raise CoordinationError(f"cannot reach ZooKeeper at {self.config.zookeeper} "
                                    f"within {self.config.connection_timeout_ms} ms ({exc or type(exc).__name__})") \
                from None
        self._state = SessionState.CONNECTED
        for path in (self._path("brokers", "ids"), self._path("brokers", "topics"), self._path("changes")):
            self._client.ensure_path(path)
        try:
            self._client.create(self._path("controller_epoch"), b"0")
        except KazooNodeExists:
            pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            resigned, self._token = self._token, None
        if resigned is not None and self._campaign is not None:
            self._dispatch(self._campaign[1])
        self._client.stop()  # closes the session: our ephemeral nodes go now, not at expiry
        self._client.close()
        if self._dispatcher is not None:
            self._dispatcher.close()

    @property
    def session_state(self) -> SessionState:
        return self._state

    @property
    def negotiated_session_timeout_ms(self) -> int:
        """What the server granted (it bounds the request to 2-20 ticks)."""
        return int(self._client._session_timeout)

    def add_session_listener(self, callback: Callable[[SessionState], None]) -> None:
        self._session_listeners.append(callback)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's connection thread: record and hand off, never block here.
        new = {KazooState.CONNECTED: SessionState.CONNECTED, KazooState.SUSPENDED: SessionState.SUSPENDED,
               KazooState.LOST: SessionState.LOST}[state]
        previous, self._state = self._state, new
        if self._closed:
            return
        for callback in list(self._session_listeners):
            self._dispatch(partial(callback, new))
        if new is SessionState.LOST:
            self._dispatch(self._resign)
        elif new is SessionState.CONNECTED and previous is SessionState.LOST:
            self._dispatch(self._after_new_session)

    def _after_new_session(self) -> None:
        """A new session after an expired one: our ephemeral nodes are gone; put them back."""
        if self._registration is not None:
            self.register_broker(self._registration)
        if self._campaign is not None:
            self._try_elect()

    def _call(self, start_async: Callable, *args: Any, write: bool = False, **kwargs: Any):
        """One request, bounded by the session timeout: kazoo queues a request made while the
        connection is down until it is back, and a broker must not hang on a suspended session.
        Reads are retried while connected; a write that failed in flight is OutcomeUnknownError."""
        timeout = self.config.session_timeout_ms / 1000
        for attempt in range(3):
            if self._client.state != KazooState.CONNECTED:
                raise CoordinationError(f"ZooKeeper at {self.config.zookeeper}: the session is "
                                        f"{self._client.state.lower()}")
            try:
                return start_async(*args, **kwargs).get(timeout=timeout)
            except (NoNodeError, KazooNodeExists, BadVersionError):
                raise
            except (ConnectionLoss, KazooTimeoutError) as exc:
                if write:
                    raise OutcomeUnknownError(f"ZooKeeper at {self.config.zookeeper}: {type(exc).__name__} "
                                              "while writing; read the state again") from None
                time.sleep(0.05 * (attempt + 1))
            except KazooException as exc:
                raise CoordinationError(f"ZooKeeper at {self.config.zookeeper}: {type(exc).__name__} {exc}") \
                    from None
        raise CoordinationError(f"ZooKeeper at {self.config.zookeeper}: connection lost three times")

    # ---- live brokers -----------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo) -> None:
        if info.broker_id != self.broker_id:
            raise CoordinationError(f"this client is broker {self.broker_id}, not {info.broker_id}")
        self._registration = info
        path = self._path("brokers", "ids", info.broker_id)
        # A broker restarted after kill -9 finds its old registration until that session expires.
        deadline = time.monotonic() + 2 * self.config.session_timeout_ms / 1000 + 1
        while True:
            try:
                self._call(self._client.create_async, path, info.to_json(), ephemeral=True, write=True)
                return
            except KazooNodeExists:
                try:
                    _, stat = self._call(self._client.get_async, path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self._client.client_id[0]:
                    self._call(self._client.set_async, path, info.to_json(), write=True)
                    return
                if time.monotonic() > deadline:
                    raise BrokerIdInUseError(f"broker id {info.broker_id} is registered by another live session "
                                             f"(session {stat.ephemeralOwner:#x})") from None
                time.sleep(0.1)

    def live_brokers(self) -> dict[int, BrokerInfo]:
        brokers = {}
        for child in self._call(self._client.get_children_async, self._path("brokers", "ids")):
            try:
                data, _ = self._call(self._client.get_async, self._path("brokers", "ids", child))
            except NoNodeError:
                continue  # gone between the listing and the read
            brokers[int(child)] = BrokerInfo.from_json(int(child), data)
        return dict(sorted(brokers.items()))

    def watch_brokers(self, callback: Callable[[dict[int, BrokerInfo]], None]) -> None:
        self._client.ChildrenWatch(self._path("brokers", "ids"),
                                   lambda _children: self._dispatch(lambda: callback(self.live_brokers())))

    # ---- the controller ---------------------------------------------------------------------

    def campaign(self, on_elected: Callable[[ControllerToken], None], on_resigned: Callable[[], None]) -> None:
        self._campaign = (on_elected, on_resigned)
        self._client.DataWatch(self._path("controller"), lambda data, stat: self._dispatch(self._try_elect))

    def _try_elect(self) -> None:
        with self._lock:
            if self._closed or self._campaign is None or self._state is not SessionState.CONNECTED:
                return
            try:
                self._elect_once()
            except CoordinationError as exc:  # the session is in trouble: the listener acts on it
                log.warning("controller election: %s", exc)

    def _elect_once(self) -> None:
        path = self._path("controller")
        while True:
            try:
                data, stat = self._call(self._client.get_async, path)
            except NoNodeError:
                pass
            else:
                if stat.ephemeralOwner != self._client.client_id[0] and self._token is not None:
                    self._resign()  # someone else holds the seat: we lost it without noticing
                return
            epoch_data, epoch_stat = self._call(self._client.get_async, self._path("controller_epoch"))
            epoch = int(epoch_data or b"0") + 1
            transaction = self._client.transaction()
            transaction.create(path, json.dumps({"version": 1, "brokerid": self.broker_id, "epoch": epoch,
                                                 "timestamp": str(int(time.time() * 1000))}).encode(),
                               ephemeral=True)
            transaction.set_data(self._path("controller_epoch"), str(epoch).encode(), version=epoch_stat.version)
            results = self._call(transaction.commit_async, write=True)
            if not any(isinstance(r, Exception) for r in results):
                self._token = ControllerToken(self.broker_id, epoch, epoch_stat.version + 1)
                log.info("broker %d is the controller, epoch %d", self.broker_id, epoch)
                self._campaign[0](self._token)
                return
            if isinstance(results[0], KazooNodeExists):
                return  # another broker won; the watch on /controller calls us again when it goes
            # the epoch moved under us (another broker's election): read it again

    def _resign(self) -> None:
        with self._lock:
            token, self._token = self._token, None
        if token is not None and self._campaign is not None:
            log.info("broker %d is no longer the controller (epoch %d)", self.broker_id, token.epoch)
            self._campaign[1]()

    def controller(self) -> tuple[int, int] | None:
        try:
            data, _ = self._call(self._client.get_async, self._path("controller"))
        except NoNodeError:
            return None
        value = _json_object(data, "/controller")
        return int(value["brokerid"]), int(value["epoch"])

    def watch_controller(self, callback: Callable[[tuple[int, int] | None], None]) -> None:
        def changed(data, stat):
            if data is None:
                self._dispatch(partial(callback, None))
            else:
                value = _json_object(data, "/controller")
                self._dispatch(partial(callback, (int(value["brokerid"]), int(value["epoch"]))))
        self._client.DataWatch(self._path("controller"), changed)

    # ---- partitions -------------------------------------------------------------------------

    def create_topic(self, topic: str, partitions: Mapping[int, PartitionState],
                     token: ControllerToken | None = None) -> None:
        transaction = self._client.transaction()
        if token is not None:
            transaction.check(self._path("controller_epoch"), token.fence)
        assignment = {str(p): list(s.replicas) for p, s in sorted(partitions.items())}
        transaction.create(self._path("brokers", "topics", topic),
                           json.dumps({"version": 3, "partitions": assignment}).encode())
        transaction.create(self._path("brokers", "topics", topic, "partitions"), b"")
        for partition, state in sorted(partitions.items()):
            transaction.create(self._path("brokers", "topics", topic, "partitions", partition), b"")
            transaction.create(self._state_path(topic, partition), state.to_json())
        self._commit(transaction, token, f"topic {topic}")

    def _commit(self, transaction, token: ControllerToken | None, what: str) -> list:
        results = self._call(transaction.commit_async, write=True)
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if not failures:
            return results
        first = failures[0]
        if token is not None and results[0] is not True and isinstance(results[0], Exception) \
                and not isinstance(results[0], RolledBackError):
            raise NotControllerError(f"controller epoch {token.epoch} of broker {token.broker_id} is no longer "
                                     f"current: {what} not written")
        if isinstance(first, KazooNodeExists):
            raise NodeExistsError(f"{what} exists already")
        if isinstance(first, BadVersionError):
            raise StaleVersionError(f"{what} changed since it was read")
        if isinstance(first, NoNodeError):
            raise CoordinationError(f"{what} does not exist")
        raise CoordinationError(f"{what}: {type(first).__name__}")

    def add_partitions(self, topic: str, partitions: Mapping[int, PartitionState]) -> None:
        # The topic znode's assignment grows in the same transaction (Kafka's
        # AdminZkClient.addPartitions), guarded by the version read.
        topic_path = self._path("brokers", "topics", topic)
        try:
            data, stat = self._call(self._client.get_async, topic_path)
        except NoNodeError:
            raise CoordinationError(f"topic {topic} does not exist") from None
        assignment = _json_object(data, topic_path)
        assignment.setdefault("partitions", {}).update({str(p): list(s.replicas)
                                                        for p, s in partitions.items()})
        transaction = self._client.transaction()
        transaction.set_data(topic_path, json.dumps(assignment).encode(), version=stat.version)
        for partition, state in sorted(partitions.items()):
            transaction.create(self._path("brokers", "topics", topic, "partitions", partition), b"")
            transaction.create(self._state_path(topic, partition), state.to_json())
        self._commit(transaction, None, f"new partitions of topic {topic}")

    def delete_topic(self, topic: str) -> None:
        try:  # kazoo's recursive delete: the children first
            self._client.delete(self._path("brokers", "topics", topic), recursive=True)
        except NoNodeError:
            pass

    def topics(self) -> list[str]:
        return sorted(self._call(self._client.get_children_async, self._path("brokers", "topics")))

    def watch_topics(self, callback: Callable[[list[str]], None]) -> None:
        self._client.ChildrenWatch(self._path("brokers", "topics"),
                                   lambda children: self._dispatch(partial(callback, sorted(children))))

    def watch_partitions(self, topic: str, callback: Callable[[list[int]], None]) -> None:
        path = self._path("brokers", "topics", topic, "partitions")

        def changed(children):  # kazoo ends the watch when the topic is deleted
            self._dispatch(partial(callback, sorted(int(c) for c in children if c.isdigit())))
        self._client.ChildrenWatch(path, changed)

    def partition_states(self, topic: str) -> dict[int, Versioned[PartitionState]]:
        try:
            children = self._call(self._client.get_children_async, self._path("brokers", "topics", topic, "partitions"))
        except NoNodeError:
            return {}
        # Every read sent before the first answer is awaited: one round trip for a topic of
        # hundreds of partitions (a new controller reads them all). A read that fails is retried
        # alone, with partition_state's session check and retries.
        timeout = self.config.session_timeout_ms / 1000
        pending = [(int(c), self._client.get_async(self._state_path(topic, int(c)))) for c in sorted(children, key=int)]
        states = {}
        for partition, result in pending:
            try:
                data, stat = result.get(timeout=timeout)
                state = Versioned(PartitionState.from_json(data, self._state_path(topic, partition)), stat.version,
                                  stat.czxid)
            except NoNodeError:
                continue
            except (KazooException, KazooTimeoutError):
                state = self.partition_state(topic, partition)
            if state is not None:
                states[partition] = state
        return states

    def partition_state(self, topic: str, partition: int) -> Versioned[PartitionState] | None:
        path = self._state_path(topic, partition)
        try:
            data, stat = self._call(self._client.get_async, path)
        except NoNodeError:
            return None
        return Versioned(PartitionState.from_json(data, path), stat.version, stat.czxid)

    def set_partition_state(self, topic: str, partition: int, state: PartitionState, expected_version: int,
                            token: ControllerToken | None = None) -> Versioned[PartitionState]:
        transaction = self._client.transaction()
        if token is not None:
            transaction.check(self._path("controller_epoch"), token.fence)
        transaction.set_data(self._state_path(topic, partition), state.to_json(), version=expected_version)
        results = self._commit(transaction, token, f"the state of {topic}-{partition}")
        return Versioned(state, results[-1].version, results[-1].czxid)

    def watch_partition_state(self, topic: str, partition: int,
                              callback: Callable[[Versioned[PartitionState] | None], None]) -> None:
        path = self._state_path(topic, partition)

        def changed(data, stat):
            value = None if stat is None else Versioned(PartitionState.from_json(data, path), stat.version, stat.czxid)
            self._dispatch(partial(callback, value))
        self._client.DataWatch(path, changed)

    # ---- change notifications ---------------------------------------------------------------

    def publish_change(self, area: str, payload: Mapping[str, Any]) -> int:
        base = self._path("changes", area)
        created = self._call(self._client.create_async, f"{base}/{CHANGE_PREFIX}", json.dumps(dict(payload)).encode(),
                             sequence=True, makepath=True, write=True)
        sequence = int(created.rsplit("_", 1)[1])
        self._published += 1
        if self._published % _PURGE_EVERY == 0:
            self._purge_changes(base, sequence)
        return sequence

    def _purge_changes(self, base: str, newest: int) -> None:
        for child in self._call(self._client.get_children_async, base):
            if int(child.rsplit("_", 1)[1]) <= newest - CHANGES_KEPT:
                try:
                    self._call(self._client.delete_async, f"{base}/{child}", write=True)
                except NoNodeError:
                    pass  # another broker purged it

    def watch_changes(self, area: str, callback: Callable[[Change], None], *, after: int | None = None) -> int:
        base = self._path("changes", area)
        self._client.ensure_path(base)
        existing = [int(c.rsplit("_", 1)[1]) for c in self._call(self._client.get_children_async, base)]
        last_existing = max(existing, default=-1)
        position = [last_existing if after is None else after]

        def deliver(children: list[str]) -> None:  # on the dispatcher: in order, once each
            for child in sorted(children, key=lambda c: int(c.rsplit("_", 1)[1])):
                sequence = int(child.rsplit("_", 1)[1])
                if sequence <= position[0]:
                    continue
                try:
                    data, _ = self._call(self._client.get_async, f"{base}/{child}")
                except NoNodeError:
                    continue  # purged
                position[0] = sequence
                callback(Change(area, sequence, _json_object(data, f"{base}/{child}")))

        self._client.ChildrenWatch(base, lambda children: self._dispatch(partial(deliver, children)))
        return last_existing
