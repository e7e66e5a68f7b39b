"""GROUP config resources (Kafka's GroupConfig, KIP-848/KIP-932): per-group overrides of the
coordinator's settings, described and altered with the config APIs and stored in
<root>/cluster/group-configs.json.

consumer.session.timeout.ms and consumer.heartbeat.interval.ms take effect on the group's
KIP-848 members at their next heartbeat. The share.* and streams.* configs are accepted,
validated and stored as Kafka does, but this broker runs no share or streams groups, so they
change nothing (their documentation says so). Bounds are the broker's (Kafka's
group.consumer.min/max.session.timeout.ms and friends, with Kafka's defaults).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from topiclake.segments.config_store import ConfigStore
from topiclake.segments.errors import InvalidConfigError
from topiclake.segments.storage import StorageLayout

from .config import GroupsConfig

_NOT_HERE = " Stored; no effect here: this broker runs no {} groups."


@dataclass(frozen=True, slots=True)
class GroupConfigSpec:
    name: str
    default: Callable[[GroupsConfig], Any]
    low: int | None = None
    high: int | None = None
    choices: tuple[str, ...] | None = None
    doc: str = ""

    @property
    def kind(self) -> str:
        return "str" if self.choices is not None else "int"

    def parse(self, raw: str) -> int | str:
        text = str(raw).strip()
        if self.kind == "str":
            if text not in self.choices and not (self.name == "share.auto.offset.reset"
                                                  and text.startswith("by_duration:")):
                raise InvalidConfigError(f"invalid value {text!r} for {self.name}: use one of "
                                         f"{', '.join(self.choices)}")
            return text
        try:
            value = int(text)
        except ValueError:
            raise InvalidConfigError(f"invalid value {text!r} for {self.name}: expected an integer") from None
        if not self.low <= value <= self.high:
            raise InvalidConfigError(f"{self.name}={value} is outside [{self.low}, {self.high}]")
        return value


def _member_timeouts(kind: str, session: Callable[[GroupsConfig], int], heartbeat: Callable[[GroupsConfig], int],
                     note: str = "") -> tuple[GroupConfigSpec, GroupConfigSpec]:
    """<kind>.session.timeout.ms and <kind>.heartbeat.interval.ms, with Kafka's broker bounds."""
    return (GroupConfigSpec(f"{kind}.session.timeout.ms", session, 45_000, 60_000,
                            doc=f"How long a {kind}-group member may go without a heartbeat before it is removed."
                                + note),
            GroupConfigSpec(f"{kind}.heartbeat.interval.ms", heartbeat, 5_000, 15_000,
                            doc=f"How often {kind}-group members are told to heartbeat." + note))


SPECS: dict[str, GroupConfigSpec] = {s.name: s for s in (
    *_member_timeouts("consumer", lambda c: c.consumer_session_timeout_ms, lambda c: c.consumer_heartbeat_interval_ms),
    *_member_timeouts("share", lambda c: 45_000, lambda c: 5_000, _NOT_HERE.format("share")),
    GroupConfigSpec("share.record.lock.duration.ms", lambda c: 30_000, 15_000, 60_000,
                    doc="Acquisition lock duration of share-group records." + _NOT_HERE.format("share")),
    GroupConfigSpec("share.auto.offset.reset", lambda c: "latest", choices=("latest", "earliest"),
                    doc="Where a share group starts reading (latest, earliest or by_duration:<ISO-8601>)."
                        + _NOT_HERE.format("share")),
    GroupConfigSpec("share.isolation.level", lambda c: "read_uncommitted",
                    choices=("read_uncommitted", "read_committed"),
                    doc="Which records a share group delivers." + _NOT_HERE.format("share")),
    *_member_timeouts("streams", lambda c: 45_000, lambda c: 5_000, _NOT_HERE.format("streams")),
    GroupConfigSpec("streams.num.standby.replicas", lambda c: 0, 0, 2,
                    doc="Standby task replicas of a streams group." + _NOT_HERE.format("streams")),
)}
_SESSION_HEARTBEAT_PAIRS = tuple((f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms")
                                 for kind in ("consumer", "share", "streams"))


class GroupConfigs:
    def __init__(self, layout: StorageLayout, config: GroupsConfig):
        self.store = ConfigStore(layout.cluster_dir / "group-configs.json")
        self.config = config

    def default(self, name: str) -> str:
        return str(SPECS[name].default(self.config))

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
            parsed[name] = spec.parse(raw)
        for session, heartbeat in _SESSION_HEARTBEAT_PAIRS:
            if session in parsed or heartbeat in parsed:
                s = parsed.get(session, SPECS[session].default(self.config))
                h = parsed.get(heartbeat, SPECS[heartbeat].default(self.config))
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
