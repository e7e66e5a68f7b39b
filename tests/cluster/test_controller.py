"""The controller's pure decisions (lib/broker/cluster/controller.py): preferred orders, who
leads after a broker dies, and when a partition moves home."""

from __future__ import annotations

from collections import Counter

from topiclake.broker.cluster.controller import (elect, elect_preferred, failover_order, initial_states,
                                                  preferred_order, reassign)
from topiclake.broker.cluster.coordination import PartitionState, Versioned


def test_every_order_names_each_broker_once_and_firsts_rotate():
    orders = [preferred_order("orders", p, [3, 1, 2]) for p in range(30)]
    assert all(sorted(order) == [1, 2, 3] for order in orders)
    assert Counter(order[0] for order in orders) == {1: 10, 2: 10, 3: 10}


def test_a_dead_brokers_partitions_spread_over_all_the_others():
    """Kafka's replica shift: the second choice varies, so one broker's death does not double
    the load of its neighbour alone."""
    for brokers in ([1, 2, 3], [1, 2, 3, 4, 5]):
        orders = [preferred_order("t", p, brokers) for p in range(60)]
        for dead in brokers:
            heirs = Counter(order[1] for order in orders if order[0] == dead)
            assert set(heirs) == set(brokers) - {dead}, (brokers, dead, heirs)
            assert max(heirs.values()) - min(heirs.values()) <= 2


def test_one_or_two_brokers_and_none():
    assert preferred_order("t", 0, [7]) == (7,)
    assert {preferred_order("t", p, [1, 2]) for p in range(2)} == {(1, 2), (2, 1)}
    assert preferred_order("t", 0, []) == ()


def test_new_topics_are_led_by_their_preferred_broker_at_epoch_zero():
    states = initial_states("t", range(6), [1, 2, 3], controller_epoch=4)
    assert all(s.leader == s.replicas[0] and s.leader_epoch == 0 and s.controller_epoch == 4
               for s in states.values())


def _state(leader: int, epoch: int, replicas: tuple[int, ...], version: int = 3) -> Versioned[PartitionState]:
    return Versioned(PartitionState(leader, epoch, replicas, 1), version)


def test_a_partition_whose_leader_died_gets_the_next_live_broker_with_the_epoch_raised():
    change = elect("t", 0, _state(1, 5, (1, 3, 2)), {2: 0, 3: 0}, 10_000, preferred_delay_ms=1000,
                   controller_epoch=2)
    assert (change.state.leader, change.state.leader_epoch, change.expected_version) == (3, 6, 3)
    assert change.state.replicas == (1, 3, 2) and change.state.controller_epoch == 2


def test_the_preferred_broker_gets_its_partition_back_only_after_the_delay():
    current = _state(3, 6, (1, 3, 2))
    assert elect("t", 0, current, {1: 9_500, 2: 0, 3: 0}, 10_000, preferred_delay_ms=1000, controller_epoch=2) is None
    back = elect("t", 0, current, {1: 8_000, 2: 0, 3: 0}, 10_000, preferred_delay_ms=1000, controller_epoch=2)
    assert (back.state.leader, back.state.leader_epoch) == (1, 7)


def test_elect_preferred_moves_only_to_a_live_preferred_broker_that_does_not_lead():
    assert elect_preferred("t", 0, _state(1, 2, (1, 2, 3)), [1, 2, 3], 1) is None
    assert elect_preferred("t", 0, _state(2, 2, (1, 2, 3)), [2, 3], 1) is None
    moved = elect_preferred("t", 0, _state(2, 2, (1, 2, 3)), [1, 2, 3], 1)
    assert (moved.state.leader, moved.state.leader_epoch) == (1, 3)


def test_a_partitions_replicas_are_the_first_of_its_preferred_order():
    states = initial_states("t", range(6), [1, 2, 3], factor=2)
    assert all(s.replicas == preferred_order("t", p, [1, 2, 3])[:2] and s.leader == s.replicas[0]
               for p, s in states.items())
    assigned = initial_states("t", range(2), [1, 2, 3], assignments={0: (3, 1), 1: (2, 3)})
    assert [(s.leader, s.replicas) for s in assigned.values()] == [(3, (3, 1)), (2, (2, 3))]


def test_failover_goes_to_live_replicas_first_then_spreads_over_the_others():
    assert failover_order("t", 0, (1, 3), {2, 3}) == [3, 2]
    # every replica down: the other live brokers, in the partition's own preferred order, so
    # that the partitions of a dead single replica spread instead of all falling to one broker
    heirs = Counter(failover_order("t", p, (1,), {2, 3, 4})[0] for p in range(60))
    assert set(heirs) == {2, 3, 4} and min(heirs.values()) >= 10
    change = elect("t", 0, _state(1, 5, (1,)), {2: 0, 3: 0, 4: 0}, 10_000, preferred_delay_ms=1000,
                   controller_epoch=2)
    assert change.state.leader == failover_order("t", 0, (1,), {2, 3, 4})[0] and change.state.replicas == (1,)


def test_a_reassignment_sets_the_replicas_and_the_first_leads():
    moved = reassign("t", 0, _state(1, 4, (1, 2)), (3, 1), controller_epoch=2)
    assert (moved.state.leader, moved.state.leader_epoch, moved.state.replicas) == (3, 5, (3, 1))
    reordered = reassign("t", 0, _state(1, 4, (1, 2)), (1, 3), controller_epoch=2)
    assert (reordered.state.leader, reordered.state.leader_epoch, reordered.state.replicas) == (1, 4, (1, 3))
    assert reassign("t", 0, _state(1, 4, (1, 2)), (1, 2), controller_epoch=2) is None
