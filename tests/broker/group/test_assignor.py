from collections import Counter

from hypothesis import given, strategies as st

from topiclake.broker.group.assignor import AssignorMember, range_assign


def m(member_id, *topics, instance=None):
    return AssignorMember(member_id, frozenset(topics), instance)


def flat(assignment, member):
    return sorted((t, p) for t, ps in assignment[member].items() for p in ps)


def tp(topic, *ps):
    return [(topic, p) for p in ps]


def test_seven_partitions_three_members():
    a = range_assign([m("c", "t"), m("a", "t"), m("b", "t")], {"t": 7})
    assert a == {"a": {"t": (0, 1, 2)}, "b": {"t": (3, 4)}, "c": {"t": (5, 6)}}


# Kafka's RangeAssignorTest cases (clients), re-expressed.

def test_one_consumer_no_topic_and_nonexistent_topic():
    assert range_assign([m("consumer1")], {}) == {"consumer1": {}}
    assert range_assign([m("consumer1", "topic1")], {}) == {"consumer1": {}}


def test_only_assigns_partitions_from_subscribed_topics():
    a = range_assign([m("consumer1", "topic1")], {"topic1": 3, "other": 3})
    assert flat(a, "consumer1") == tp("topic1", 0, 1, 2)


def test_one_consumer_multiple_topics():
    a = range_assign([m("consumer1", "topic1", "topic2")], {"topic1": 1, "topic2": 2})
    assert flat(a, "consumer1") == tp("topic1", 0) + tp("topic2", 0, 1)


def test_two_consumers_one_topic():
    a = range_assign([m("consumer1", "topic1"), m("consumer2", "topic1")], {"topic1": 1})
    assert flat(a, "consumer1") == tp("topic1", 0) and flat(a, "consumer2") == []
    a = range_assign([m("consumer1", "topic1"), m("consumer2", "topic1")], {"topic1": 2})
    assert flat(a, "consumer1") == tp("topic1", 0) and flat(a, "consumer2") == tp("topic1", 1)


def test_multiple_consumers_mixed_topics():
    a = range_assign([m("consumer1", "topic1"), m("consumer2", "topic1", "topic2"), m("consumer3", "topic1")],
                     {"topic1": 3, "topic2": 2})
    assert flat(a, "consumer1") == tp("topic1", 0)
    assert flat(a, "consumer2") == tp("topic1", 1) + tp("topic2", 0, 1)
    assert flat(a, "consumer3") == tp("topic1", 2)


def test_two_consumers_two_topics_six_partitions():
    a = range_assign([m("consumer1", "topic1", "topic2"), m("consumer2", "topic1", "topic2")],
                     {"topic1": 3, "topic2": 3})
    assert flat(a, "consumer1") == tp("topic1", 0, 1) + tp("topic2", 0, 1)
    assert flat(a, "consumer2") == tp("topic1", 2) + tp("topic2", 2)


def test_static_members_ordered_by_instance_id_not_member_id():
    parts = {"topic1": 3, "topic2": 3}
    a = range_assign([m("consumer-b", "topic1", "topic2", instance="instance1"),
                      m("consumer-a", "topic1", "topic2", instance="instance2")], parts)
    assert flat(a, "consumer-b") == tp("topic1", 0, 1) + tp("topic2", 0, 1)
    # a static member sorts before a dynamic one whatever their member ids
    a = range_assign([m("consumer-b", "topic1", "topic2", instance="instance1"),
                      m("consumer-a", "topic1", "topic2")], parts)
    assert flat(a, "consumer-b") == tp("topic1", 0, 1) + tp("topic2", 0, 1)
    assert flat(a, "consumer-a") == tp("topic1", 2) + tp("topic2", 2)


def test_static_member_assignment_persistent():
    statics = [m(f"consumer{i}", "topic1", "topic2", instance=f"instance{i}") for i in (1, 2, 3)]
    parts = {"topic1": 5, "topic2": 4}
    expected = {"consumer1": tp("topic1", 0, 1) + tp("topic2", 0), "consumer2": tp("topic1", 2) + tp("topic2", 1),
                "consumer3": tp("topic1", 3) + tp("topic2", 2)}
    for dynamic in ("consumer4", "consumer5"):  # replacing the dynamic member changes nothing else
        a = range_assign(statics + [m(dynamic, "topic1", "topic2")], parts)
        assert {k: flat(a, k) for k in a} == {**expected, dynamic: tp("topic1", 4) + tp("topic2", 3)}


def test_static_assignment_survives_member_id_changes():
    parts = {"topic1": 5, "topic2": 5}

    def by_instance(ids):
        members = [m(mid, "topic1", "topic2", instance=f"instance{i}") for i, mid in zip((1, 2, 3), ids)]
        a = range_assign(members, parts)
        return {x.group_instance_id: flat(a, x.member_id) for x in members}

    first = by_instance(["consumer1", "consumer2", "consumer3"])
    assert first == {"instance1": tp("topic1", 0, 1) + tp("topic2", 0, 1),
                     "instance2": tp("topic1", 2, 3) + tp("topic2", 2, 3),
                     "instance3": tp("topic1", 4) + tp("topic2", 4)}
    assert by_instance(["consumer1", "consumer5", "consumer4"]) == first


def test_member_ids_compare_as_java_strings():
    # In code points U+FF5E < U+1F600; in UTF-16 U+1F600 starts with the surrogate D83D < FF5E.
    a = range_assign([m("\uff5e", "t"), m("\U0001F600", "t")], {"t": 3})
    assert a["\U0001F600"] == {"t": (0, 1)} and a["\uff5e"] == {"t": (2,)}


@st.composite
def groups(draw):
    topics = draw(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 30), min_size=1))
    members = draw(st.lists(st.tuples(st.text(min_size=1, max_size=6), st.none() | st.text(max_size=4),
                                      st.sets(st.sampled_from("abcdefg"))),
                            min_size=1, max_size=8, unique_by=lambda x: x[0]))
    instances = set()
    out = []
    for mid, inst, subs in members:
        if inst in instances:
            inst = None  # instance ids are unique within a group
        instances.add(inst)
        out.append(AssignorMember(mid, frozenset(subs), inst))
    return out, topics


@given(groups())
def test_every_subscribed_partition_assigned_once_and_balanced(case):
    members, topics = case
    a = range_assign(members, topics)
    assert set(a) == {x.member_id for x in members}
    for topic, count in topics.items():
        subscribers = [x for x in members if topic in x.topics]
        owners = Counter(p for x in members for p in a[x.member_id].get(topic, ()))
        if not subscribers:
            assert not owners
            continue
        assert sorted(owners) == list(range(count)) and set(owners.values()) <= {1}
        sizes = [len(a[x.member_id].get(topic, ())) for x in subscribers]
        assert max(sizes) - min(sizes) <= 1
    for x in members:
        assert set(a[x.member_id]) <= x.topics
