"""Drives a classic group coordinator like the broker would, with explicit time."""

from __future__ import annotations

import itertools

from topiclake.broker.group.api import CommitOffset, HeartbeatRequest, JoinRequest, OffsetCommitRequest, Protocol, SyncRequest
from topiclake.broker.group.assignor import AssignorMember, range_assign
from topiclake.broker.group.classic import ClassicGroupSettings, ClassicGroups
from topiclake.protocol.consumer_protocol import (ConsumerAssignment, ConsumerSubscription, decode_assignment,
                                                      decode_subscription, encode_assignment, encode_subscription)
from topiclake.broker.group.errors import GroupErrorCode as E


G = "group-1"


SUB = encode_subscription(ConsumerSubscription(("t",)))


SESSION, REBALANCE = 10_000, 30_000


class Cluster:
    """Drives a coordinator like the broker would: keeps every record and every answer."""

    def __init__(self, **config):
        ids = itertools.count(1)
        self.coord = ClassicGroups(ClassicGroupSettings(**config), new_member_suffix=lambda: f"id{next(ids)}")
        self.now = 1_000
        self.records = []
        self.answers = {}

    def _take(self, result):
        self.records += result.records
        for c in result.completions:
            assert c.ticket not in self.answers
            self.answers[c.ticket] = c.response
        return result

    def join(self, member_id="", client="c", instance=None, protocols=(("range", SUB),), require=False):
        req = JoinRequest(G, member_id, "consumer", tuple(Protocol(n, m) for n, m in protocols), SESSION,
                          REBALANCE, instance, client, "/127.0.0.1", require)
        return self._take(self.coord.join(req, self.now))

    def sync(self, member_id, generation, assignments=(), instance=None):
        return self._take(self.coord.sync(SyncRequest(G, generation, member_id, tuple(assignments), instance),
                                          self.now))

    def heartbeat(self, member_id, generation, instance=None):
        return self.coord.heartbeat(HeartbeatRequest(G, generation, member_id, instance), self.now).response

    def settle(self):
        """Let the initial rebalance delay (3 s, extended once by new arrivals) run out."""
        self.tick(3_000)
        self.tick(3_000)

    def tick(self, advance=0):
        self.now += advance
        return self._take(self.coord.tick(self.now))

    def answer(self, result):
        """The response of a call, whether it came at once or later."""
        return result.response if result.response is not None else self.answers.get(result.ticket)

    def commit(self, offsets, generation=-1, member_id="", instance=None):
        req = OffsetCommitRequest(G, tuple(CommitOffset("t", p, o) for p, o in offsets), generation, member_id,
                                  instance)
        return {r.partition: r.error for r in self._take(self.coord.commit_offsets(req, self.now)).response}

    def full_join(self, clients):
        """`clients` join during the initial delay; returns member ids and the leader's response."""
        calls = [self.join(client=c) for c in clients]
        if self.coord.config.initial_rebalance_delay_ms:
            assert all(c.response is None for c in calls)  # parked in the initial rebalance delay
        # Kafka's initial delay: 3 s, extended by 3 s while new members keep arriving.
        self.settle()
        responses = [self.answer(c) for c in calls]
        assert all(r.error is E.NONE for r in responses)
        return responses

    def assign(self, leader_response, partitions=7):
        subs = [AssignorMember(m.member_id, frozenset(decode_subscription(m.metadata).topics))
                for m in leader_response.members]
        plan = range_assign(subs, {"t": partitions})
        return [(mid, encode_assignment(ConsumerAssignment(tuple(plan[mid].items())))) for mid in plan]

    def rebalance_and_sync(self, responses):
        """Followers sync first (parked), then the leader; returns member id -> partitions."""
        leader = next(r for r in responses if r.members)
        followers = [r for r in responses if r is not leader]
        parked = [self.sync(r.member_id, r.generation_id) for r in followers]
        assert all(p.response is None for p in parked)
        done = self.sync(leader.member_id, leader.generation_id, self.assign(leader))
        owned = {}
        for r, call in zip([*followers, leader], [*parked, done]):
            answer = self.answer(call)
            assert answer.error is E.NONE
            owned[r.member_id] = [p for _, ps in decode_assignment(answer.assignment).partitions for p in ps]
        return owned
