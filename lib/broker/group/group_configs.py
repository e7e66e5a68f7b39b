"""GROUP config resources (Kafka's GroupConfig, KIP-848/KIP-932): per-group overrides of the
coordinator's settings, described and altered with the config APIs and stored in
<root>/cluster/group-configs.json.

consumer.session.timeout.ms and consumer.heartbeat.interval.ms take effect on the group's
KIP-848 members at their next heartbeat; the share.* configs on the share group's next heartbeat
(timeouts) or next acquisition (locks, delivery limit, in-flight window, offset reset, isolation
level). The streams.* configs are accepted, validated and stored as Kafka does, but this broker
runs no streams groups, so they change nothing (their documentation says so). Bounds are the
broker's (Kafka's group.consumer.min/max.session.timeout.ms, group.share.min/max.* and friends).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

from topiclake.segments.config_store import ConfigStore
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.storage import StorageLayout

from .share_config import ShareConfig
from .config import GroupsConfig

_NOT_HERE = " Stored; no effect here: this broker runs no {} groups."


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)(?:[.,](\d{0,9}))?S)?)?", re.IGNORECASE)


def iso_duration_ms(text: str) -> int:
    """An ISO-8601 duration (java.time.Duration.parse: PnDTnHnMn.nS, not negative) in milliseconds."""
    m = _DURATION.fullmatch(text.strip())
    if m is None or not any(m.groups()) or text.strip().upper().endswith("T"):
        raise InvalidConfigError(f"{text!r} is not an ISO-8601 duration such as P1DT2H or PT30M")
    days, hours, minutes, seconds, fraction = m.groups()
    ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + int(seconds or 0) * 1000
    return ms + int((fraction or "0").ljust(3, "0")[:3])


@dataclass(frozen=True, slots=True)
class GroupConfigSpec:
    name: str
    default: Callable[["GroupConfigs"], Any]
    bounds: Callable[["GroupConfigs"], tuple[int, int]] | None = None
    choices: tuple[str, ...] | None = field(default=None)
    doc: str = ""

    @property
    def kind(self) -> str:
        return "str" if self.choices is not None else "int"

    def parse(self, raw: str, configs: "GroupConfigs") -> int | str:
        text = str(raw).strip()
        if self.kind == "str":
            if self.name == "share.auto.offset.reset" and text.startswith("by_duration:"):
                iso_duration_ms(text[len("by_duration:"):])
                return text
            if text not in self.choices:
                raise InvalidConfigError(f"invalid value {text!r} for {self.name}: use one of "
                                         f"{', '.join(self.choices)}")
            return text
        try:
            value = int(text)
        except ValueError:
            raise InvalidConfigError(f"invalid value {text!r} for {self.name}: expected an integer") from None
        low, high = self.bounds(configs)
        if not low <= value <= high:
            raise InvalidConfigError(f"{self.name}={value} is outside [{low}, {high}]")
        return value


def _member_timeouts(kind: str, session: Callable[["GroupConfigs"], int], heartbeat: Callable[["GroupConfigs"], int],
                     session_bounds: Callable[["GroupConfigs"], tuple[int, int]] = lambda g: (45_000, 60_000),
                     heartbeat_bounds: Callable[["GroupConfigs"], tuple[int, int]] = lambda g: (5_000, 15_000),
                     note: str = "") -> tuple[GroupConfigSpec, GroupConfigSpec]:
    """<kind>.session.timeout.ms and <kind>.heartbeat.interval.ms, with the broker's bounds."""
    return (GroupConfigSpec(f"{kind}.session.timeout.ms", session, session_bounds,
                            doc=f"How long a {kind}-group member may go without a heartbeat before it is removed."
                                + note),
            GroupConfigSpec(f"{kind}.heartbeat.interval.ms", heartbeat, heartbeat_bounds,
                            doc=f"How often {kind}-group members are told to heartbeat." + note))


SPECS: dict[str, GroupConfigSpec] = {s.name: s for s in (
    *_member_timeouts("consumer", lambda g: g.config.consumer_session_timeout_ms,
                      lambda g: g.config.consumer_heartbeat_interval_ms),
    *_member_timeouts("share", lambda g: g.share.session_timeout_ms, lambda g: g.share.heartbeat_interval_ms,
                      lambda g: (g.share.min_session_timeout_ms, g.share.max_session_timeout_ms),
                      lambda g: (g.share.min_heartbeat_interval_ms, g.share.max_heartbeat_interval_ms)),
    GroupConfigSpec("share.record.lock.duration.ms", lambda g: g.share.record_lock_duration_ms,
                    lambda g: (g.share.min_record_lock_duration_ms, g.share.max_record_lock_duration_ms),
                    doc="How long a share-group member holds the records it acquired before they are "
                        "delivered again."),
    GroupConfigSpec("share.delivery.count.limit", lambda g: g.share.delivery_count_limit,
                    lambda g: (g.share.min_delivery_count_limit, g.share.max_delivery_count_limit),
                    doc="Deliveries of a record to a share group before it is archived."),
    GroupConfigSpec("share.partition.max.record.locks", lambda g: g.share.partition_max_record_locks,
                    lambda g: (g.share.min_partition_max_record_locks, g.share.max_partition_max_record_locks),
                    doc="Most records of one partition a share group has in flight (acquired or not yet "
                        "acknowledged behind the first unacknowledged one)."),
    GroupConfigSpec("share.auto.offset.reset", lambda g: "latest", choices=("latest", "earliest"),
                    doc="Where a share group starts reading a partition it has no state for: latest, earliest or "
                        "by_duration:<ISO-8601> (the first record at most that old)."),
    GroupConfigSpec("share.isolation.level", lambda g: "read_uncommitted",
                    choices=("read_uncommitted", "read_committed"),
                    doc="Which records a share group delivers: read_committed skips open and aborted "
                        "transactions."),
    *_member_timeouts("streams", lambda g: 45_000, lambda g: 5_000, note=_NOT_HERE.format("streams")),
    GroupConfigSpec("streams.num.standby.replicas", lambda g: 0, lambda g: (0, 2),
                    doc="Standby task replicas of a streams group." + _NOT_HERE.format("streams")),
)}
_SESSION_HEARTBEAT_PAIRS = tuple((f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms")
                                 for kind in ("consumer", "share", "streams"))


class GroupConfigs:
    def __init__(self, layout: StorageLayout, config: GroupsConfig, share: ShareConfig = ShareConfig()):
        self.store = ConfigStore(layout.cluster_dir / "group-configs.json")
        self.config = config
        self.share = share

    def default(self, name: str) -> str:
        return str(SPECS[name].default(self))

    def value(self, group_id: str, name: str) -> int | str:
        """The group's value of a config: its override, else the broker's default."""
        raw = self.overrides(group_id).get(name)
        if raw is not None:
            try:
                return SPECS[name].parse(raw, self)
            except InvalidConfigError:
                pass  # stored under other bounds (the broker's [share] settings changed): the default
        return SPECS[name].default(self)

    def overrides(self, group_id: str) -> dict[str, str]:
        return self.store.get(group_id)

    def group_ids(self) -> list[str]:
        """Groups with at least one override."""
        return sorted(self.store.all())

    def validate(self, values: dict[str, str]) -> None:
        """Names, values and Kafka's rule that a heartbeat interval is below its session timeout."""
        parsed = {}
        for name, raw in values.items():
            spec = SPECS.get(name)
            if spec is None:
                raise InvalidConfigError(f"unknown group config {name!r}")
            parsed[name] = spec.parse(raw, self)
        for session, heartbeat in _SESSION_HEARTBEAT_PAIRS:
            if session in parsed or heartbeat in parsed:
                s = parsed.get(session, SPECS[session].default(self))
                h = parsed.get(heartbeat, SPECS[heartbeat].default(self))
                if h >= s:
                    raise InvalidConfigError(f"{heartbeat} ({h}) must be less than {session} ({s})")

    def alter(self, group_id: str, updates: dict[str, str | None], *, replace: bool = False,
              validate_only: bool = False) -> dict[str, str]:
        if not group_id:
            raise InvalidConfigError("a group config needs a group id")
        if validate_only:
            values = {} if replace else self.overrides(group_id)
            values.update(updates)
            values = {k: v for k, v in values.items() if v is not None}
            self.validate(values)
            return values
        return self.store.update(group_id, updates, replace=replace, validate=self.validate)

    # -- what the coordinator uses
    def session_timeout_ms(self, group_id: str) -> int:
        return int(self.overrides(group_id).get("consumer.session.timeout.ms", self.config.consumer_session_timeout_ms))

    def heartbeat_interval_ms(self, group_id: str) -> int:
        return int(self.overrides(group_id).get("consumer.heartbeat.interval.ms",
                                                 self.config.consumer_heartbeat_interval_ms))
