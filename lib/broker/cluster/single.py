"""The coordination interface for one broker alone (no `[cluster]` setting): today's behaviour.

This broker is always connected, always the controller (epoch 0), the only live broker, and the
leader of every partition at leader epoch 0 (`LEADER_EPOCH` of topiclake.broker.constants), so
the broker runs one code path whether or not it is in a cluster. Partition states nobody wrote
read as "this broker leads at epoch 0, version -1". Compare-and-set and change notifications work
in memory with the same rules as in ZooKeeper, so code written against the interface behaves the
same here; nothing is persisted: the single broker's state lives in its storage root as before.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

from .coordination import (BrokerInfo, Change, Coordination, ControllerToken, EventDispatcher, NodeExistsError,
                           NotControllerError, PartitionState, SessionState, StaleVersionError, Versioned)

SINGLE_BROKER_EPOCH = 0
UNWRITTEN_VERSION = -1  # a state nobody wrote: its first compare-and-set names this version


class SingleBrokerCoordination(Coordination):
    def __init__(self, broker_id: int, *, dispatch: Callable[[Callable[[], None]], None] | None = None):
        self.broker_id = broker_id
        self._dispatcher = EventDispatcher(f"coordination-events-{broker_id}") if dispatch is None else None
        self._dispatch = dispatch or self._dispatcher
        self._token = ControllerToken(broker_id, SINGLE_BROKER_EPOCH, SINGLE_BROKER_EPOCH)
        self._lock = threading.RLock()
        self._registration: BrokerInfo | None = None
        self._topics: dict[str, dict[int, Versioned[PartitionState]]] = {}
        self._created = 0  # a counter standing in for ZooKeeper's creation zxid
        self._changes: dict[str, list[Change]] = {}
        self._watchers: dict[str, list[Callable[..., None]]] = {}

    def _notify(self, key: str, *args: Any) -> None:
        for callback in list(self._watchers.get(key, ())):
            self._dispatch(lambda callback=callback: callback(*args))

    def _watch(self, key: str, callback: Callable[..., None], *now: Any) -> None:
        self._watchers.setdefault(key, []).append(callback)
        self._dispatch(lambda: callback(*now))

    # ---- life cycle and session -------------------------------------------------------------

    def start(self) -> None:
        pass

    def close(self) -> None:
        if self._dispatcher is not None:
            self._dispatcher.close()

    @property
    def session_state(self) -> SessionState:
        return SessionState.CONNECTED

    def add_session_listener(self, callback: Callable[[SessionState], None]) -> None:
        pass  # the session never changes

    # ---- live brokers -----------------------------------------------------------------------

    def register_broker(self, info: BrokerInfo) -> None:
        self._registration = info
        self._notify("brokers", self.live_brokers())

    def live_brokers(self) -> dict[int, BrokerInfo]:
        return {} if self._registration is None else {self.broker_id: self._registration}

    def watch_brokers(self, callback: Callable[[dict[int, BrokerInfo]], None]) -> None:
        self._watch("brokers", callback, self.live_brokers())

    # ---- the controller ---------------------------------------------------------------------

    def campaign(self, on_elected: Callable[[ControllerToken], None], on_resigned: Callable[[], None]) -> None:
        self._dispatch(lambda: on_elected(self._token))

    def controller(self) -> tuple[int, int] | None:
        return self.broker_id, SINGLE_BROKER_EPOCH

    def watch_controller(self, callback: Callable[[tuple[int, int] | None], None]) -> None:
        self._watch("controller", callback, self.controller())

    # ---- partitions -------------------------------------------------------------------------

    def _check_token(self, token: ControllerToken | None) -> None:
        if token is not None and token != self._token:
            raise NotControllerError(f"controller token {token} is not this broker's")

    def create_topic(self, topic: str, partitions: Mapping[int, PartitionState],
                     token: ControllerToken | None = None) -> None:
        with self._lock:
            self._check_token(token)
            if topic in self._topics:
                raise NodeExistsError(f"topic {topic} exists already")
            self._created += 1
            self._topics[topic] = {p: Versioned(s, 0, self._created) for p, s in partitions.items()}
            self._notify("topics", self.topics())

    def add_partitions(self, topic: str, partitions: Mapping[int, PartitionState]) -> None:
        with self._lock:
            existing = self._topics.setdefault(topic, {})
            if set(partitions) & set(existing):
                raise NodeExistsError(f"a partition of topic {topic} exists already")
            self._created += 1
            existing.update({p: Versioned(s, 0, self._created) for p, s in partitions.items()})
            self._notify("topics", self.topics())
            self._notify(f"partitions:{topic}", sorted(existing))

    def delete_topic(self, topic: str) -> None:
        with self._lock:
            if self._topics.pop(topic, None) is not None:
                self._notify("topics", self.topics())

    def topics(self) -> list[str]:
        return sorted(self._topics)

    def watch_topics(self, callback: Callable[[list[str]], None]) -> None:
        self._watch("topics", callback, self.topics())

    def watch_partitions(self, topic: str, callback: Callable[[list[int]], None]) -> None:
        self._watch(f"partitions:{topic}", callback, sorted(self._topics.get(topic, {})))

    def partition_states(self, topic: str) -> dict[int, Versioned[PartitionState]]:
        return dict(sorted(self._topics.get(topic, {}).items()))

    def partition_state(self, topic: str, partition: int) -> Versioned[PartitionState]:
        """What was written, or: this broker leads at epoch 0 (version -1, nothing written)."""
        written = self._topics.get(topic, {}).get(partition)
        if written is not None:
            return written
        return Versioned(PartitionState(self.broker_id, SINGLE_BROKER_EPOCH, (self.broker_id,)), UNWRITTEN_VERSION)

    def set_partition_state(self, topic: str, partition: int, state: PartitionState, expected_version: int,
                            token: ControllerToken | None = None) -> Versioned[PartitionState]:
        with self._lock:
            self._check_token(token)
            current = self.partition_state(topic, partition)
            if current.version != expected_version:
                raise StaleVersionError(f"the state of {topic}-{partition} is at version {current.version}, "
                                        f"not {expected_version}")
            new = Versioned(state, current.version + 1, current.created)
            self._topics.setdefault(topic, {})[partition] = new
            self._notify(f"state:{topic}:{partition}", new)
            return new

    def watch_partition_state(self, topic: str, partition: int,
                              callback: Callable[[Versioned[PartitionState] | None], None]) -> None:
        self._watch(f"state:{topic}:{partition}", callback, self.partition_state(topic, partition))

    # ---- change notifications ---------------------------------------------------------------

    def publish_change(self, area: str, payload: Mapping[str, Any]) -> int:
        with self._lock:
            log = self._changes.setdefault(area, [])
            change = Change(area, len(log), dict(payload))
            log.append(change)
            self._notify(f"changes:{area}", change)
            return change.sequence

    def watch_changes(self, area: str, callback: Callable[[Change], None], *, after: int | None = None) -> int:
        with self._lock:
            log = self._changes.get(area, [])
            last = len(log) - 1
            for change in log[(last if after is None else after) + 1:]:
                self._dispatch(lambda change=change: callback(change))
            self._watchers.setdefault(f"changes:{area}", []).append(callback)
            return last
