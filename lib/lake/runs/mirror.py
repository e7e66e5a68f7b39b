"""Mirror a table's group offsets into the broker's `__consumer_offsets`, so `topiclake groups lag`
and standard Kafka tools (kafka-consumer-groups.sh, Burrow, ...) see how far the pipeline is.

The Delta log stays the source of truth (the txn actions); the broker gets a copy after each
commit, through a standard Kafka client (confluent-kafka's AdminClient AlterConsumerGroupOffsets,
i.e. an OffsetCommit with no member and generation -1, what `kafka-consumer-groups.sh
--reset-offsets` sends). The lake never imports topiclake.broker: the protocol is the seam.

Which broker (first match wins):
1. an explicit bootstrap (`--bootstrap host:port[,host:port]`); `none` turns mirroring off;
2. the live registrations under `<root>/cluster/brokers/*.json` (docs/DESIGN.md): the brokers that
   serve this storage root, so the group lands in the same `__consumer_offsets` as the topics;
   a registration whose lease expired is a broker that crashed or is gone;
3. no broker: nothing is mirrored (a batch-only lake is fine).

A secured broker is reached as a client-properties file (`--command-config`) or `[client]` of the
settings file say (security.client_config); a registered broker is dialled at its endpoint for
that security protocol.

A broker that cannot be reached, or refuses the commit (e.g. a live consumer uses the same
group id), is a warning, never a failure: the table is already committed, and the next run
mirrors the offsets again (every run mirrors all of the group's partitions, not only the moved
ones, so a missed mirror heals itself).
"""

from __future__ import annotations

import json
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Mapping

from topiclake.security.client_config import PLAINTEXT, ClientSecurity
from topiclake.segments.storage import StorageLayout

log = logging.getLogger(__name__)

DISABLED = "none"
DEFAULT_TIMEOUT_S = 10.0
# Errors a coordinator answers while it is starting or moving; worth a retry until the deadline.
_RETRIABLE = {"COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
              "REQUEST_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT", "NETWORK_EXCEPTION"}


@dataclass(slots=True)
class MirrorResult:
    bootstrap: str | None  # None: no broker configured, nothing attempted
    group: str
    partitions: int = 0  # partitions whose offset the broker accepted
    error: str | None = None
    source: str = ""  # where the bootstrap came from: flag, registrations
    skipped: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.bootstrap is not None and self.error is None

    def describe(self) -> str:
        if self.bootstrap is None:
            return "offsets not mirrored (no broker configured or registered)"
        if self.error is not None:
            return f"offsets NOT mirrored to {self.bootstrap}: {self.error}"
        return f"offsets of {self.partitions} partitions mirrored to {self.bootstrap} ({self.source})"


def find_bootstrap(layout: StorageLayout | None, explicit: str | None, *, now_ms: int | None = None,
                   protocol: str = "PLAINTEXT") -> tuple[str | None, str]:
    """(bootstrap servers or None, where they came from); a registered broker's endpoint for
    `protocol` (its first listener if it has none). `layout` None: an object-store root, where
    brokers register nothing yet (only --bootstrap mirrors)."""
    if explicit is not None:
        return (None, "disabled") if explicit.strip().lower() == DISABLED else (explicit, "--bootstrap")
    if layout is None:
        return None, "none registered"
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    live, stale = [], []
    for path in sorted(layout.brokers_dir.glob("*.json")) if layout.brokers_dir.is_dir() else []:
        try:
            reg = json.loads(path.read_text())
            address = f"{reg['host']}:{int(reg['port'])}"
            for endpoint in reg.get("endpoints", ()):
                name, _, hostport = endpoint.partition("://")
                if name == protocol:
                    address = hostport
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable broker registration %s: %s", path, exc)
            continue
        (live if reg.get("lease_expires_ms", 0) > now_ms else stale).append(address)
    if live:
        return ",".join(live), f"registered in {layout.brokers_dir}"
    if stale:
        log.warning("broker registrations under %s have expired leases (%s): the brokers are down; "
                    "offsets are not mirrored", layout.brokers_dir, ", ".join(stale))
    return None, "none registered"


def mirror_offsets(bootstrap: str | None, group: str, offsets: Mapping[tuple[str, int], int], *,
                   source: str = "", timeout_s: float = DEFAULT_TIMEOUT_S,
                   security: ClientSecurity = PLAINTEXT) -> MirrorResult:
    """Commit `offsets` ({(topic, partition): next offset}) for `group` on the broker. Never raises
    for broker trouble: the result says what happened (and a warning is logged)."""
    result = MirrorResult(bootstrap, group, source=source)
    if bootstrap is None or not offsets:
        return result
    try:
        _reachable(bootstrap, min(timeout_s, 3.0))
        result.partitions = _commit(bootstrap, group, offsets, timeout_s, security)
    except MirrorError as exc:
        result.error = str(exc)
        log.warning("group %s: offsets not mirrored to the broker at %s (the Delta table holds them; the "
                    "next run mirrors again): %s", group, bootstrap, exc)
    return result


class MirrorError(Exception):
    pass


def _reachable(bootstrap: str, timeout_s: float) -> None:
    """A plain TCP connect first: librdkafka would otherwise retry a dead address for its whole
    timeout (and log every attempt)."""
    errors = []
    for address in bootstrap.split(","):
        host, _, port = address.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{address}: {exc}")
    raise MirrorError("broker unreachable (" + "; ".join(errors) + ")")


def _commit(bootstrap: str, group: str, offsets: Mapping[tuple[str, int], int], timeout_s: float,
            security: ClientSecurity) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "socket.timeout.ms": int(timeout_s * 1000),
                         **security.librdkafka()})
    wanted = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    deadline = time.monotonic() + timeout_s
    while True:
        left = max(deadline - time.monotonic(), 0.5)
        try:
            futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)],
                                                         request_timeout=left)
            answered = futures[group].result(timeout=left + 1).topic_partitions
            failed = [tp for tp in answered if tp.error is not None]
        except KafkaException as exc:
            failed, why = None, exc.args[0]
        except Exception as exc:  # noqa: BLE001  (a future's timeout and the like: still a warning)
            raise MirrorError(f"{type(exc).__name__}: {exc}") from None
        if failed == []:
            return len(answered)
        if failed:
            why = failed[0].error
        name = why.name() if hasattr(why, "name") else str(why)
        if name not in _RETRIABLE or time.monotonic() >= deadline:
            detail = ", ".join(f"{tp.topic}-{tp.partition}@{tp.offset}: {tp.error.name()}" for tp in failed or [])
            raise MirrorError(f"the broker refused the commit of group {group!r}: {detail or why}")
        time.sleep(0.2)
