"""The cluster as one client: bootstrap, metadata, a connection per broker, and routing.

`ClusterClient(["a:1", "b:2"])` asks the first broker that answers for the cluster's brokers;
from then on every broker it learned of is a way in, so the bootstrap brokers may die. A request
goes where Kafka says it must: a partition's to its leader, a group's to its coordinator
(FindCoordinator), one that any broker answers to any live one. `scatter` sends a batch of
partitions or groups to the brokers that serve them, and asks again for the items that came back
NOT_LEADER_OR_FOLLOWER / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (errors.RETRIABLE) or
whose broker was lost, after forgetting what it knew of leaders and coordinators, until
`retry_s` has passed. A broker whose connection failed is skipped for DOWN_S (its error kept),
so a dead broker costs one refused connection, not a 30 s wait.

Blocking and not thread-safe: one caller at a time (the console keeps one per identity, behind a
lock).
"""

from __future__ import annotations

import time
import uuid
from typing import Callable, Hashable, Iterable, Sequence, TypeVar

from kio.schema.errors import ErrorCode

from topiclake.security.client_config import PLAINTEXT, ClientSecurity

from .conn import AuthenticationError, BrokerConnection
from .errors import CannotConnect, KafkaError
from .results import Node

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DOWN_S = 3.0  # a broker whose connection failed is not tried again for this long
CONNECT_TIMEOUT_S = 5.0
COORDINATOR_GROUP = 0  # FindCoordinator key types
COORDINATOR_TRANSACTION = 1

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def parse_bootstrap(bootstrap: str | Sequence[str]) -> list[str]:
    """`a:1,b:2` (or a list of host:port) as a list of addresses, in order, without repeats."""
    items = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = [item.strip() for item in items if item.strip()]
    if not addresses:
        raise ValueError(f"no broker address in {bootstrap!r}")
    return list(dict.fromkeys(addresses))


class ClusterClient:
    def __init__(self, bootstrap: str | Sequence[str], *, security: ClientSecurity = PLAINTEXT,
                 client_id: str = "topiclake", timeout_s: float = 10.0, retry_s: float = 20.0):
        self.bootstrap = parse_bootstrap(bootstrap)
        self.security = security
        self.client_id = client_id
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.nodes: dict[int, Node] = {}
        self._connections: dict[str, BrokerConnection] = {}
        self._down: dict[str, tuple[float, OSError]] = {}  # address -> (skipped until, why)
        self._leaders: dict[tuple[str, int], int] = {}
        self._missing: dict[str, ErrorCode] = {}  # topic -> why the last Metadata had no partitions for it
        self._partitions: dict[str, set[int]] = {}  # topic -> its partitions, as the last Metadata said
        self._coordinators: dict[tuple[int, str], int] = {}

    # ------------------------------------------------------------------ connections
    def connect(self) -> "ClusterClient":
        """Learn the cluster's brokers from a bootstrap broker (raises as `request_any` does)."""
        self.metadata(())
        return self

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    def __enter__(self) -> "ClusterClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _connection(self, address: str) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None:
            try:
                connection = BrokerConnection(address, timeout=self.timeout_s, connect_timeout=CONNECT_TIMEOUT_S,
                                              client_id=self.client_id, security=self.security)
            except (OSError, ValueError) as exc:  # ValueError: not host:port
                reason = getattr(exc, "strerror", None) or exc
                raise CannotConnect(getattr(exc, "errno", None), f"{address}: {reason}") from exc
            self._connections[address] = connection
        return connection

    def send(self, address: str, body):
        """`body` to the broker at `address`; its response. A broker skipped since its
        connection failed raises that failure again, without trying."""
        down = self._down.get(address)
        if down is not None and time.monotonic() < down[0]:
            raise down[1]
        try:
            response = self._connection(address).request(body)
        except AuthenticationError:
            self._discard(address)
            raise
        except (OSError, EOFError, ValueError) as exc:  # ValueError: kio could not read the answer
            self._discard(address)
            failure = exc if isinstance(exc, OSError) else ConnectionError(f"{address}: {exc}")
            self._down[address] = (time.monotonic() + DOWN_S, failure)
            raise failure from None
        self._down.pop(address, None)
        return response

    def _discard(self, address: str) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    def _addresses(self) -> list[str]:
        """Every way in: the known brokers, then the bootstrap list; live ones first."""
        known = list(dict.fromkeys([n.address for n in self.nodes.values()] + self.bootstrap))
        now = time.monotonic()
        return sorted(known, key=lambda a: a in self._down and now < self._down[a][0])

    def request_any(self, body):
        """`body` to any live broker (those skipped as down are tried last). When none answers,
        the last failure: CannotConnect when no connection could be opened at all."""
        failure: OSError | None = None
        for address in self._addresses():
            try:
                return self.send(address, body)
            except OSError as exc:
                # a connection lost mid-request says more than a refused one
                if failure is None or not isinstance(exc, CannotConnect):
                    failure = exc
        raise failure

    def request_node(self, node_id: int, body):
        node = self.nodes.get(node_id)
        if node is None:
            self.metadata(())
            node = self.nodes.get(node_id)
        if node is None:
            raise KafkaError(f"broker {node_id}", ErrorCode.broker_not_available)
        return self.send(node.address, body)

    def live_nodes(self) -> list[Node]:
        """The brokers the cluster reports, but those skipped as down."""
        now = time.monotonic()
        return [n for n in self.nodes.values() if not (n.address in self._down and now < self._down[n.address][0])]

    # --------------------------------------------------------------------- metadata
    def metadata(self, topics: Iterable[str] | None = None):
        """A fresh Metadata answer (kio) for `topics` (None: all, (): none, only the brokers);
        the brokers and the leaders it names are remembered for routing."""
        from kio.schema.metadata.v12 import request as req

        wanted = None if topics is None else tuple(req.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=t)
                                                   for t in topics)
        response = self.request_any(req.MetadataRequest(topics=wanted, allow_auto_topic_creation=False,
                                                        include_topic_authorized_operations=False))
        self.cluster_id, self.controller_id = response.cluster_id, response.controller_id
        self.nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        for t in response.topics:
            if t.error_code.value != 0:
                self._missing[t.name] = t.error_code
            else:
                self._partitions[t.name] = {p.partition_index for p in t.partitions}
            for p in t.partitions:
                if p.error_code.value == 0 and p.leader_id >= 0:
                    self._leaders[(t.name, p.partition_index)] = p.leader_id
        return response

    def leaders(self, keys: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int | KafkaError]:
        """(topic, partition) -> its leader's id; -1 when it has none now (retriable), or why the
        cluster does not know the partition (UNKNOWN_TOPIC_OR_PARTITION, TOPIC_AUTHORIZATION_FAILED)."""
        keys = list(keys)
        unknown = sorted({t for t, p in keys if (t, p) not in self._leaders})
        self._missing.clear()
        if unknown:
            self.metadata(unknown)
        out: dict[tuple[str, int], int | KafkaError] = {}
        for topic, partition in keys:
            if topic in self._missing:
                out[(topic, partition)] = KafkaError(f"{topic}-{partition}", self._missing[topic])
            elif partition not in self._partitions.get(topic, {partition}):
                out[(topic, partition)] = KafkaError(f"{topic}-{partition}", ErrorCode.unknown_topic_or_partition)
            else:
                out[(topic, partition)] = self._leaders.get((topic, partition), -1)
        return out

    def coordinators(self, keys: Iterable[str], key_type: int = COORDINATOR_GROUP) -> dict[str, int | KafkaError]:
        """group id (or transactional id) -> its coordinator's id, or why none was found."""
        from kio.schema.find_coordinator.v4 import request as req

        keys = list(keys)
        unknown = tuple(k for k in keys if (key_type, k) not in self._coordinators)
        failed: dict[str, KafkaError] = {}
        if unknown:
            response = self.request_any(req.FindCoordinatorRequest(key_type=key_type, coordinator_keys=unknown))
            for c in response.coordinators:
                if c.error_code.value == 0:
                    self._coordinators[(key_type, c.key)] = c.node_id
                    self.nodes.setdefault(c.node_id, Node(c.node_id, c.host, c.port))
                else:
                    failed[c.key] = KafkaError(f"finding the coordinator of {c.key}", c.error_code, c.error_message)
        return {k: failed[k] if k in failed else self._coordinators[(key_type, k)] for k in keys}

    def forget_routes(self) -> None:
        """Leaders and coordinators are looked up again (they moved, or their broker died)."""
        self._leaders.clear()
        self._coordinators.clear()

    # ---------------------------------------------------------------------- routing
    def scatter(self, items: Iterable[K], route: Callable[[list[K]], dict[K, int | KafkaError]],
                ask: Callable[[int, list[K]], dict[K, V]]) -> dict[K, V | KafkaError]:
        """item -> answer: `ask(node_id, items)` for the items each broker serves (`route` says
        which; an item it cannot route is answered with its error), asked again for the items
        answered with a retriable KafkaError or whose broker was lost, until `retry_s` passed.
        A lost broker's items, when time is up, raise that loss."""
        pending = list(dict.fromkeys(items))
        out: dict[K, V | KafkaError] = {}
        deadline, pause = time.monotonic() + self.retry_s, 0.05
        while pending:
            retry: list[K] = []
            lost: OSError | None = None
            by_node: dict[int, list[K]] = {}
            for item, node in route(pending).items():
                if isinstance(node, KafkaError) or node < 0:
                    out[item] = node if isinstance(node, KafkaError) else KafkaError(
                        "-".join(map(str, item)) if isinstance(item, tuple) else str(item),
                        ErrorCode.leader_not_available)
                    if out[item].retriable:
                        retry.append(item)
                else:
                    by_node.setdefault(node, []).append(item)
            for node, chunk in by_node.items():
                try:
                    answers = ask(node, chunk)
                except OSError as exc:
                    lost = exc
                    retry.extend(chunk)
                    continue
                for item in chunk:
                    out[item] = answers[item]
                    if isinstance(answers[item], KafkaError) and answers[item].retriable:
                        retry.append(item)
            if not retry or time.monotonic() + pause > deadline or not self._still_reachable():
                if lost is not None and any(item not in out for item in retry):
                    raise lost
                break
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
            self.forget_routes()
            self._refresh_quietly()
            pending = retry
        return out

    def _still_reachable(self) -> bool:
        return bool(self.live_nodes()) or any(a not in self._down for a in self.bootstrap)

    def _refresh_quietly(self) -> None:
        try:
            self.metadata(())
        except OSError:
            pass  # the next round's routing tries again

    def on_leaders(self, keys: Iterable[tuple[str, int]],
                   ask: Callable[[int, list[tuple[str, int]]], dict]) -> dict:
        """`scatter` over partitions, each to its leader."""
        return self.scatter(keys, self.leaders, ask)

    def on_coordinators(self, groups: Iterable[str], ask: Callable[[int, list[str]], dict]) -> dict:
        """`scatter` over groups, each to its coordinator."""
        return self.scatter(groups, self.coordinators, ask)

    def on_every_broker(self, ask: Callable[[int], V]) -> tuple[dict[int, V], dict[int, OSError]]:
        """`ask(node_id)` of every broker the cluster reports: (answers, failures) by broker id;
        a broker that is down is a failure, the others still answer."""
        self.metadata(())
        answers, failures = {}, {}
        for node_id in sorted(self.nodes):
            try:
                answers[node_id] = ask(node_id)
            except OSError as exc:
                failures[node_id] = exc
        return answers, failures
