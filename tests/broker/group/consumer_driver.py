"""Drives the consumer-group (KIP-848) state machine with explicit members and metadata."""

from __future__ import annotations

import itertools

from topiclake.broker.group.consumer import ConsumerGroups, ConsumerHeartbeatRequest as HB
from topiclake.broker.group.errors import GroupErrorCode as E

G = "g"
TOPICS = {"t": 7}


def metadata(topic):
    return TOPICS.get(topic)


class Driver:
    def __init__(self, metadata=metadata):
        ids = itertools.count(1)
        self.groups = ConsumerGroups(session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                                     new_member_id=lambda: f"m{next(ids)}")
        self.metadata = metadata  # topic -> partition count
        self.now = 0
        self.owned = {}  # member -> what the client believes it owns
        self.epoch = {}

    def join(self, member_id="", topics=("t",)):
        r = self.groups.heartbeat(HB(G, member_id, 0, subscribed_topics=topics, rebalance_timeout_ms=5_000),
                                  self.metadata, self.now)
        assert r.error is E.NONE
        self.owned[r.member_id] = dict(r.assignment)
        self.epoch[r.member_id] = r.member_epoch
        return r.member_id

    def beat(self, member_id):
        """A well-behaved client: acknowledges whatever it was last told it owns."""
        r = self.groups.heartbeat(HB(G, member_id, self.epoch[member_id], owned=self.owned[member_id]),
                                  self.metadata, self.now)
        assert r.error is E.NONE, r
        self.epoch[member_id] = r.member_epoch
        if r.assignment is not None:
            self.owned[member_id] = dict(r.assignment)
        self.check_exclusive()
        return r

    def check_exclusive(self):
        group = self.groups.groups[G]
        for p in range(TOPICS["t"]):
            assert len(group.owner_of("t", p)) <= 1, (p, group.owner_of("t", p))
        seen = {}
        for member, parts in self.owned.items():
            if member not in group.members:
                continue
            for p in parts.get("t", ()):
                assert p not in seen, f"partition {p} owned by {seen[p]} and {member}"
                seen[p] = member

    def settle(self, rounds=4):
        for _ in range(rounds):
            for m in list(self.groups.groups[G].members):
                self.beat(m)

    def sizes(self):
        return sorted((len(self.owned[m].get("t", ())) for m in self.groups.groups[G].members), reverse=True)
