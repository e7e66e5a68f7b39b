"""KIP-848 online migration over both pure cores (classic and consumer), driven as the
coordinator drives them (`migration.finish` after every call), with every record kept and
replayed into fresh cores to check a restart rebuilds the same groups."""

import itertools
import uuid

import pytest

from topiclake.broker.group import consumer_classic, migration
from topiclake.broker.group.api import (CommitOffset, HeartbeatRequest, JoinRequest, MemberIdentity,
                                        OffsetCommitRequest, Protocol, Result, SyncRequest)
from topiclake.broker.group.classic import ClassicGroupSettings, ClassicGroups
from topiclake.broker.group.consumer import ConsumerGroups, ConsumerHeartbeatRequest as HB, MemberState
from topiclake.protocol.consumer_protocol import (ConsumerAssignment, ConsumerSubscription, decode_assignment,
                                                      encode_assignment, encode_subscription)
from topiclake.broker.group.errors import GroupErrorCode as E
from topiclake.broker.group.migration import MigrationPolicy
from topiclake.broker.group.records import ConsumerGroupKey, GroupMetadataKey, decode_record
from topiclake.broker.group.state import GroupState

G = "g"
TOPICS = {"t": 4}
TOPIC_IDS = {"t": uuid.UUID(int=7)}
SESSION, REBALANCE = 6_000, 30_000  # the consumer-protocol session is 10 s


def metadata(topic):
    return TOPICS.get(topic)


def topic_id(topic):
    return TOPIC_IDS.get(topic)


def topic_name(tid):
    return next((n for n, i in TOPIC_IDS.items() if i == tid), None)


def sub(owned=(), version=3):
    return encode_subscription(ConsumerSubscription(("t",), owned_partitions=owned), version)


def parts(assignment_bytes):
    return {t: set(ps) for t, ps in decode_assignment(assignment_bytes).partitions}


class Coordinator:
    """Both cores of one shard, called the way GroupCoordinator calls them."""

    def __init__(self, policy=MigrationPolicy.BIDIRECTIONAL):
        ids = itertools.count(1)
        self.policy = policy
        self.core = ClassicGroups(ClassicGroupSettings(initial_rebalance_delay_ms=0),
                                     new_member_suffix=lambda: f"{next(ids)}")
        self.groups = ConsumerGroups(10_000, 1_000, new_member_id=lambda: f"m{next(ids)}",
                                     downgrade_enabled=policy.downgrade_enabled)
        self.now = 1_000
        self.log = []
        self.answers = {}

    def run(self, call):
        result = call(self.now)
        if not isinstance(result, Result):
            result = Result(result)
        result = migration.finish(self.core, self.groups, result, topic_id, self.now)
        self.log += [(r.key_bytes(), r.value_bytes()) for r in result.records]
        for c in result.completions:
            self.answers[c.ticket] = c.response
        return result

    # ------------------------------------------------------------- classic members
    def join(self, member_id="", protocols=(("range", sub()),), protocol_type="consumer", require=False):
        req = JoinRequest(G, member_id, protocol_type, tuple(Protocol(n, m) for n, m in protocols), SESSION,
                          REBALANCE, client_id="classic", client_host="/127.0.0.1", require_known_member_id=require)
        result = self.run(lambda t: migration.join(self.core, self.groups, req, metadata, t))
        return result.response if result.response is not None else ("parked", result.ticket)

    def sync(self, member_id, generation, assignments=()):
        req = SyncRequest(G, generation, member_id, tuple(assignments), protocol_type="consumer")
        if G in self.groups.groups:
            return self.run(lambda t: consumer_classic.sync(self.groups, req, t)).response
        result = self.run(lambda t: self.core.sync(req, t))
        return result.response if result.response is not None else self.answers.get(result.ticket)

    def heartbeat(self, member_id, generation):
        req = HeartbeatRequest(G, generation, member_id)
        if G in self.groups.groups:
            return self.run(lambda t: consumer_classic.heartbeat(self.groups, req, t)).response
        return self.run(lambda t: self.core.heartbeat(req, t)).response

    def leave(self, member_id):
        who = (MemberIdentity(member_id),)
        if G in self.groups.groups:
            return self.run(lambda t: consumer_classic.leave(self.groups, G, who)).response
        return self.run(lambda t: self.core.leave(G, who, t)).response

    def classic_member(self, assign_all=True):
        """One classic member in a Stable classic group; the leader assigns every partition to it."""
        first = self.join(require=True)
        assert first.error is E.MEMBER_ID_REQUIRED
        joined = self.join(first.member_id)
        assert joined.error is E.NONE and joined.leader == joined.member_id
        assignment = encode_assignment(ConsumerAssignment((("t", (0, 1, 2, 3)),))) if assign_all else b""
        assert self.sync(joined.member_id, joined.generation_id, [(joined.member_id, assignment)]).error is E.NONE
        return joined.member_id, joined.generation_id

    # ------------------------------------------------------------ consumer members
    def hb(self, member_id="", epoch=0, owned=None, topics=("t",)):
        req = HB(G, member_id, epoch, subscribed_topics=topics if epoch == 0 else None, rebalance_timeout_ms=REBALANCE,
                 owned=owned)
        return self.run(lambda t: migration.consumer_heartbeat(self.core, self.groups, req, metadata, self.policy,
                                                               t)).response

    def commit(self, member_id, generation, offset=5):
        req = OffsetCommitRequest(G, (CommitOffset("t", 0, offset),), generation, member_id)
        verdict = self.groups.validate_offset_commit(G, member_id, generation)
        if verdict is not None:
            if verdict is not E.NONE:
                return verdict
            req = OffsetCommitRequest(G, req.offsets)
        return self.run(lambda t: self.core.commit_offsets(req, t)).response[0].error

    def committed(self):
        return {(p.topic, p.partition): p.offset for p in self.core.fetch_offsets(G).partitions}

    # ---------------------------------------------------------------------- reload
    def reload(self):
        fresh = Coordinator(self.policy)
        for key, value in self.log:
            record = decode_record(key, value)
            if isinstance(record.key, ConsumerGroupKey):
                fresh.groups.replay(record, self.now, topic_name)
            else:
                fresh.core.replay(record, self.now)
        return fresh


def state(c):
    """What a restart must give back: both forms of the group and the offsets."""
    classic = c.core.groups.get(G)
    consumer = c.groups.groups.get(G)
    return (
        None if classic is None else (classic.protocol_type, classic.generation, classic.protocol, classic.leader,
                                      {m: (x.session_timeout_ms, x.assignment) for m, x in classic.members.items()}),
        None if consumer is None else (consumer.group_epoch, consumer.assignment_epoch, consumer.target, {
            m: (x.member_epoch, x.state, x.assigned, x.classic, x.subscribed_topics)
            for m, x in consumer.members.items()}),
        c.committed())


def upgraded():
    """A classic member with every partition and a commit, then a consumer-protocol member."""
    c = Coordinator()
    classic_id, generation = c.classic_member()
    assert c.commit(classic_id, generation, offset=5) is E.NONE
    joined = c.hb()
    assert joined.error is E.NONE, joined
    return c, classic_id, generation, joined.member_id


def test_a_consumer_member_converts_a_classic_group_and_keeps_its_state():
    c, classic_id, generation, consumer_id = upgraded()
    group = c.groups.groups[G]
    member = group.members[classic_id]
    # Kafka's fromClassicGroup: epochs from the generation, the last assignment as current and
    # target, the classic metadata kept; then the joining member bumps the epoch.
    assert member.member_epoch == generation and member.classic.session_timeout_ms == SESSION
    assert member.assigned == {"t": frozenset({0, 1, 2, 3})}
    assert group.group_epoch == generation + 1
    assert group.target == {classic_id: {"t": frozenset({0, 1})}, consumer_id: {"t": frozenset({2, 3})}}
    # The classic form is gone from the log (a tombstone), its offsets are not.
    assert c.core.groups[G].members == {} and c.core.groups[G].protocol_type is None
    assert (GroupMetadataKey(G), None) in [(decode_record(k, v).key, v) for k, v in c.log]
    assert c.committed() == {("t", 0): 5}
    # The new member waits: its partitions are still the classic member's.
    assert group.members[consumer_id].state is MemberState.UNRELEASED_PARTITIONS
    assert state(c.reload()) == state(c)


def test_the_classic_member_rejoins_through_the_consumer_group():
    c, classic_id, generation, consumer_id = upgraded()
    assert c.heartbeat(classic_id, generation) is E.REBALANCE_IN_PROGRESS
    joined = c.join(classic_id)  # an eager member owns nothing when it rejoins
    assert (joined.error, joined.generation_id, joined.protocol_name, joined.leader, joined.members) == \
        (E.NONE, generation + 1, "range", "", ())
    synced = c.sync(classic_id, joined.generation_id)
    assert synced.error is E.NONE and parts(synced.assignment) == {"t": {0, 1}}
    assert c.heartbeat(classic_id, joined.generation_id) is E.NONE
    # The consumer member gets the released partitions; nothing is owned twice.
    assert c.hb(consumer_id, generation + 1, owned={}).assignment == {"t": frozenset({2, 3})}
    # Commits are checked against the member epoch: the old generation is refused.
    assert c.commit(classic_id, generation) is E.ILLEGAL_GENERATION
    assert c.commit(classic_id, joined.generation_id, offset=9) is E.NONE
    assert c.committed() == {("t", 0): 9}
    assert state(c.reload()) == state(c)


def test_parked_classic_requests_are_told_to_rejoin():
    c = Coordinator()
    first, generation = c.classic_member()
    second = c.join()  # a second classic member: the group rebalances, the second one is parked
    assert second[0] == "parked"
    assert c.hb().error is E.NONE
    assert c.answers[second[1]].error is E.REBALANCE_IN_PROGRESS
    assert set(c.groups.groups[G].members) >= {first}


def test_the_policy_and_the_protocol_type_can_refuse_an_upgrade():
    for policy in (MigrationPolicy.DOWNGRADE, MigrationPolicy.DISABLED):
        c = Coordinator(policy)
        classic_id, _ = c.classic_member()
        refused = c.hb()
        assert refused.error is E.GROUP_ID_NOT_FOUND and policy.value in refused.error_message
        assert G not in c.groups.groups and classic_id in c.core.groups[G].members
    c = Coordinator()
    c.join(protocol_type="connect", protocols=(("default", b"\x00"),))
    refused = c.hb()
    assert refused.error is E.GROUP_ID_NOT_FOUND and "consumer embedded protocol" in refused.error_message
    # A heartbeat of a member that never joined (epoch > 0) does not convert anything.
    assert c.hb("m9", 3).error is E.GROUP_ID_NOT_FOUND


def test_an_empty_classic_group_is_replaced_whatever_the_policy():
    c = Coordinator(MigrationPolicy.DISABLED)
    classic_id, generation = c.classic_member()
    assert c.commit(classic_id, generation) is E.NONE
    assert c.leave(classic_id).members[0].error is E.NONE
    assert c.hb().error is E.NONE
    assert G in c.groups.groups and c.committed() == {("t", 0): 5}
    assert state(c.reload()) == state(c)


def test_the_last_consumer_member_leaving_converts_the_group_back():
    c, classic_id, generation, consumer_id = upgraded()
    joined = c.join(classic_id)
    c.sync(classic_id, joined.generation_id)
    epoch = c.groups.groups[G].group_epoch
    left = c.hb(consumer_id, -1)
    assert left.error is E.NONE
    assert G not in c.groups.groups
    group = c.core.groups[G]
    # Kafka's fromConsumerGroup: generation = the group epoch, then a rebalance.
    assert (group.protocol_type, group.generation, group.state) == ("consumer", epoch, GroupState.PREPARING_REBALANCE)
    assert parts(group.members[classic_id].assignment) == {"t": {0, 1}}
    assert c.committed() == {("t", 0): 5}
    assert state(c.reload())[1:] == state(c)[1:]  # a reload sees the persisted (Stable) form
    # The classic member hears of it on its next heartbeat and rejoins as the leader.
    assert c.heartbeat(classic_id, epoch) is E.REBALANCE_IN_PROGRESS
    rejoined = c.join(classic_id)
    assert rejoined.error is E.NONE and rejoined.leader == classic_id and rejoined.generation_id == epoch + 1
    everything = encode_assignment(ConsumerAssignment((("t", (0, 1, 2, 3)),)))
    assert c.sync(classic_id, rejoined.generation_id, [(classic_id, everything)]).error is E.NONE
    assert c.core.groups[G].state is GroupState.STABLE
    assert state(c.reload()) == state(c)


def test_without_downgrade_the_group_stays_a_consumer_group():
    c = Coordinator(MigrationPolicy.UPGRADE)
    classic_id, generation = c.classic_member()
    consumer_id = c.hb().member_id
    joined = c.join(classic_id)
    c.sync(classic_id, joined.generation_id)
    assert c.hb(consumer_id, -1).error is E.NONE
    group = c.groups.groups[G]
    assert list(group.members) == [classic_id] and G not in c.groups.downgrades
    assert c.heartbeat(classic_id, joined.generation_id) is E.REBALANCE_IN_PROGRESS
    again = c.join(classic_id)
    assert parts(c.sync(classic_id, again.generation_id).assignment) == {"t": {0, 1, 2, 3}}


def test_a_classic_member_joins_a_consumer_group():
    c = Coordinator()
    consumer_id = c.hb().member_id
    first = c.join(require=True)
    assert first.error is E.MEMBER_ID_REQUIRED
    joined = c.join(first.member_id)
    assert joined.error is E.NONE and c.groups.groups[G].members[first.member_id].uses_classic_protocol
    waiting = c.sync(first.member_id, joined.generation_id)
    assert waiting.error is E.NONE and parts(waiting.assignment) == {}  # its partitions are the other's still
    c.hb(consumer_id, 1, owned={"t": frozenset({0, 1, 2, 3})})  # told to revoke 2, 3
    c.hb(consumer_id, 1, owned={"t": frozenset({0, 1})})  # revoked them
    # Its partitions are free now: the classic member is asked to rejoin and gets them.
    assert c.heartbeat(first.member_id, joined.generation_id) is E.REBALANCE_IN_PROGRESS
    again = c.join(first.member_id)
    assert parts(c.sync(first.member_id, again.generation_id).assignment) == {"t": {2, 3}}
    assert state(c.reload()) == state(c)
    # Protocols the group's classic members cannot share are refused, as is another type.
    assert c.join(protocols=(("roundrobin", sub()),)).error is E.INCONSISTENT_GROUP_PROTOCOL
    assert c.join(protocol_type="connect").error is E.INCONSISTENT_GROUP_PROTOCOL


def test_a_classic_join_replaces_an_empty_consumer_group():
    c = Coordinator()
    consumer_id = c.hb().member_id
    c.hb(consumer_id, -1)
    assert c.groups.groups[G].members == {}
    c.classic_member()
    assert G not in c.groups.groups and c.core.groups[G].state is GroupState.STABLE
    assert state(c.reload()) == state(c)


def test_a_cooperative_classic_member_revokes_before_it_moves_on():
    c = Coordinator()
    first = c.join(require=True)
    joined = c.join(first.member_id, protocols=(("cooperative-sticky", sub()),))
    everything = encode_assignment(ConsumerAssignment((("t", (0, 1, 2, 3)),)))
    c.sync(joined.member_id, joined.generation_id, [(joined.member_id, everything)])
    classic_id, generation = joined.member_id, joined.generation_id
    c.hb()
    assert c.heartbeat(classic_id, generation) is E.REBALANCE_IN_PROGRESS
    # It rejoins still owning all four: it keeps two and must give up the others first.
    owning = sub(owned=(("t", (0, 1, 2, 3)),))
    kept = c.join(classic_id, protocols=(("cooperative-sticky", owning),))
    assert kept.generation_id == generation  # not at the new epoch before it revoked
    assert parts(c.sync(classic_id, kept.generation_id).assignment) == {"t": {0, 1}}
    assert c.heartbeat(classic_id, kept.generation_id) is E.REBALANCE_IN_PROGRESS
    done = c.join(classic_id, protocols=(("cooperative-sticky", sub(owned=(("t", (0, 1)),))),))
    assert done.generation_id == generation + 1
    assert c.groups.groups[G].members[classic_id].state is MemberState.STABLE


def test_classic_members_of_a_consumer_group_time_out_like_kafkas_timers():
    c, classic_id, generation, consumer_id = upgraded()
    assert c.heartbeat(classic_id, generation) is E.REBALANCE_IN_PROGRESS  # must rejoin within REBALANCE
    c.now += REBALANCE
    c.hb(consumer_id, generation + 1, owned={})  # keeps the consumer member alive
    removed = c.run(lambda t: c.groups.tick(t)).response
    assert removed == [(G, classic_id)]
    assert c.hb(consumer_id, generation + 1, owned={}).error is E.NONE  # epoch moved on; it may catch up
    # A classic member's session is its own (SESSION), not the group's (10 s).
    c2, classic2, _, consumer2 = upgraded()
    c2.now += SESSION
    assert c2.run(lambda t: c2.groups.tick(t)).response == [(G, classic2)]
    assert list(c2.groups.groups[G].members) == [consumer2]


def test_the_policy_setting_is_checked_at_start():
    from topiclake.broker.group.config import GroupsConfig
    from topiclake.segments.errors import InvalidConfigError

    assert GroupsConfig.from_section({"consumer_migration_policy": "Upgrade"}).migration_policy() is \
        MigrationPolicy.UPGRADE
    with pytest.raises(InvalidConfigError, match="bidirectional, upgrade, downgrade, disabled, not 'sideways'"):
        GroupsConfig.from_section({"consumer_migration_policy": "sideways"})
