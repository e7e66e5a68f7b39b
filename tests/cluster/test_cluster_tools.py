"""The tools in a cluster (issue 30): `topiclake groups` and `topics` give the right answers
whichever of three brokers they are pointed at, with a comma list whose first broker is dead,
with no --bootstrap (the brokers registered in the root), and after a broker is killed -9; and
Kafka's own kafka-consumer-groups prints the same lag against the same cluster.

Three real brokers on one root; a topic whose six partitions are led by all three; six groups
with committed offsets, coordinated by more than one broker (so no single broker answers all)."""

from __future__ import annotations

import time
from pathlib import Path
import uuid

import pytest
from typer.testing import CliRunner

from bench._kafka import fetch_peers
from topiclake.cli import app
from topiclake.client import ClusterClient

from tests.support.broker_process import free_port
from tests.support.kafka_tools import KafkaTools
from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_clients import topic_with_groups

pytestmark = pytest.mark.slow

TOPIC = "spread"
PARTITIONS = 6
GROUPS = [f"readers-{i}" for i in range(6)]


def records_in(partition: int) -> int:
    return 3 + partition


def committed(group_index: int, partition: int) -> int:
    """What group i committed on a partition: behind the log end by a different amount each."""
    return max(records_in(partition) - 1 - (group_index + partition) % 3, 0)


@pytest.fixture(scope="module")
def tools_cluster(zookeeper, tmp_path_factory):
    work = tmp_path_factory.mktemp("cluster-tools")
    settings = cluster_settings(zookeeper.connect_string, f"/tools-{uuid.uuid4().hex[:8]}")
    brokers = ClusterBrokers(work, settings, count=3).start()
    try:
        topic_with_groups(brokers.bootstrap, TOPIC, {p: records_in(p) for p in range(PARTITIONS)},
                          {g: {p: committed(i, p) for p in range(PARTITIONS)} for i, g in enumerate(GROUPS)},
                          replication_factor=3)
        yield brokers
    finally:
        brokers.stop()


def cli(*args: str, env: dict | None = None):
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def lag_rows(output: str) -> dict[int, tuple[int, int, int]]:
    """partition -> (current offset, log end offset, lag) of `topiclake groups lag`."""
    return {int(r[1]): (int(r[2]), int(r[3]), int(r[4])) for r in (line.split() for line in output.splitlines())
            if r and r[0] == TOPIC}


def expected_lag(group: str) -> dict[int, tuple[int, int, int]]:
    index = GROUPS.index(group)
    return {p: (committed(index, p), records_in(p), records_in(p) - committed(index, p)) for p in range(PARTITIONS)}


def test_the_cluster_spreads_leaders_and_coordinators(tools_cluster):
    """The premise of the tests below: no one broker leads every partition or coordinates every group."""
    with ClusterClient(tools_cluster.bootstrap) as client:
        leaders = set(client.leaders([(TOPIC, p) for p in range(PARTITIONS)]).values())
        coordinators = set(client.coordinators(GROUPS).values())
    assert leaders == {1, 2, 3}
    assert len(coordinators) >= 2, coordinators


@pytest.mark.parametrize("broker_id", [1, 2, 3])
def test_groups_commands_are_right_through_any_broker(tools_cluster, broker_id):
    bootstrap = tools_cluster.bootstrap_of(broker_id)
    listed = cli("groups", "list", "--bootstrap", bootstrap)
    assert sorted(line.split()[0] for line in listed.splitlines()[1:] if line.startswith("readers-")) == GROUPS
    for group in GROUPS:
        assert lag_rows(cli("groups", "lag", group, "--bootstrap", bootstrap)) == expected_lag(group)
        described = cli("groups", "describe", group, "--bootstrap", bootstrap)
        assert described.startswith(f"Group: {group}\tState: Empty\t") and "Members: 0" in described
    dry = cli("groups", "reset-offsets", GROUPS[0], "--topic", TOPIC, "--to-latest", "--bootstrap", bootstrap)
    assert [line.split()[1:] for line in dry.splitlines() if line.startswith(TOPIC)] == \
        [[str(p), str(records_in(p))] for p in range(PARTITIONS)]


def test_reset_offsets_commits_at_the_coordinator_and_a_dead_first_bootstrap_is_skipped(tools_cluster):
    dead = f"127.0.0.1:{free_port()}"
    bootstrap = f"{dead},{tools_cluster.bootstrap_of(2)}"
    group = "resettable"
    started = time.monotonic()
    done = cli("groups", "reset-offsets", group, "--topic", TOPIC, "--to-offset", "2", "--execute",
               "--bootstrap", bootstrap)
    assert "Committed new offsets of 6 partitions" in done
    assert lag_rows(cli("groups", "lag", group, "--bootstrap", bootstrap)) == {
        p: (2, records_in(p), records_in(p) - 2) for p in range(PARTITIONS)}
    assert time.monotonic() - started < 20  # a dead address is one refused connection, not a wait


def test_topics_describe_without_bootstrap_asks_the_brokers_registered_in_the_root(tools_cluster):
    described = cli("topics", "describe", TOPIC, env={"TOPICLAKE_ROOT": str(tools_cluster.root)})
    header, *rows = [dict(field.partition(":")[::2] for field in line.strip().split("\t"))
                     for line in described.splitlines()]  # "Configs: " is empty when nothing is overridden
    header, rows = {k: v.strip() for k, v in header.items()}, [{k: v.strip() for k, v in r.items()} for r in rows]
    assert header["ReplicationFactor"] == "3" and all(len(r["Replicas"].split(",")) == 3 for r in rows)
    with ClusterClient(tools_cluster.bootstrap) as client:
        leaders = client.leaders([(TOPIC, p) for p in range(PARTITIONS)])
    assert {int(r["Partition"]): int(r["Leader"]) for r in rows} == {p: leaders[(TOPIC, p)] for p in range(PARTITIONS)}


def test_lag_is_what_kafka_consumer_groups_prints(tools_cluster):
    peers = fetch_peers("kafka")
    tools = KafkaTools(Path(peers["KAFKA_HOME"]), peers["KAFKA_VERSION"])
    for broker_id, group in zip((1, 2, 3), GROUPS[:3]):
        bootstrap = tools_cluster.bootstrap_of(broker_id)
        theirs = tools("kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
        rows = [line.split() for line in theirs.splitlines() if line.split()[:2] == [group, TOPIC]]
        kafka = {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows}
        ours = lag_rows(cli("groups", "lag", group, "--bootstrap", bootstrap))
        assert kafka == ours == expected_lag(group)


def test_groups_commands_keep_working_after_a_broker_is_killed(tools_cluster):
    """Last in the module: broker 1 is killed -9; its partitions and groups move to the others."""
    tools_cluster.kill(1)
    bootstrap = f"{tools_cluster.bootstrap_of(1)},{tools_cluster.bootstrap_of(3)}"  # the dead broker first
    deadline = time.monotonic() + 60
    while True:  # until the others took over broker 1's groups (they load them from __consumer_offsets)
        result = CliRunner().invoke(app, ["groups", "list", "--bootstrap", bootstrap])
        names = [line.split()[0] for line in result.stdout.splitlines()[1:] if line.startswith("readers-")]
        if result.exit_code == 0 and sorted(names) == GROUPS or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert result.exit_code == 0 and sorted(names) == GROUPS, result.output
    for group in GROUPS:
        started = time.monotonic()
        assert lag_rows(cli("groups", "lag", group, "--bootstrap", bootstrap)) == expected_lag(group)
        assert time.monotonic() - started < 15
    described = cli("topics", "describe", TOPIC, "--bootstrap", bootstrap)
    assert "Leader: 1\t" not in described
