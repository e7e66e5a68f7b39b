"""The console against a cluster (issue 30): pointed at one broker of three, it shows every
partition's offsets (whoever leads it), every group and its lag (whoever coordinates it) and the
controller the cluster reports; after its bootstrap broker is killed -9 every page is still
served; a broker outage is logged once, not at every sample. Pages are read in Chromium."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import pytest

from topiclake.broker.cluster.ensemble import Ensemble
from topiclake.client import ClusterClient, admin

from tests.support.cluster_brokers import ClusterBrokers, cluster_settings
from tests.support.cluster_clients import topic_with_groups
from tests.support.console import ConsoleProcess, cells, screenshot

pytestmark = pytest.mark.slow

TOPIC = "spread"
PARTITIONS = 6
GROUPS = [f"team-{i}" for i in range(5)]
OUTAGE_LINE = "console samples as 'console' fail"


def records_in(partition: int) -> int:
    return 2 + partition


def committed(group_index: int, partition: int) -> int:
    return (group_index + partition) % records_in(partition)


@pytest.fixture(scope="module")
def cluster_world(tmp_path_factory):
    work = tmp_path_factory.mktemp("console-cluster")
    with Ensemble(work / "zookeeper", 1) as zookeeper:
        brokers = ClusterBrokers(work, cluster_settings(zookeeper.connect_string, f"/console-{uuid.uuid4().hex[:8]}"))
        brokers.start()
        try:
            topic_with_groups(brokers.bootstrap, TOPIC, {p: records_in(p) for p in range(PARTITIONS)},
                              {g: {p: committed(i, p) for p in range(PARTITIONS)} for i, g in enumerate(GROUPS)})
            with ConsoleProcess(brokers.root, brokers.bootstrap_of(1), log_path=work / "console.log") as console:
                yield brokers, console
        finally:
            brokers.stop()


def check_pages(page, console, artifacts, name: str) -> None:
    """Every partition's offsets, every group's lag, whichever broker leads or coordinates them."""
    page.goto(console.url + f"/topics/{TOPIC}")
    assert cells(page, "#partitions td.start") == ["0"] * PARTITIONS
    assert cells(page, "#partitions td.end") == [str(records_in(p)) for p in range(PARTITIONS)]
    screenshot(page, artifacts, f"{name}-topic")
    page.goto(console.url + "/topics")
    assert cells(page, f"#topics tr[data-topic={TOPIC}] td.end") == [str(sum(map(records_in, range(PARTITIONS))))]
    page.goto(console.url + "/groups")
    assert [g for g in cells(page, "#groups tr[data-group] td:nth-child(1)") if g.startswith("team-")] == GROUPS
    screenshot(page, artifacts, f"{name}-groups")
    for index, group in enumerate(GROUPS):
        response = page.goto(console.url + f"/groups/{group}")
        assert response.status == 200, group
        assert cells(page, "#lag tr[data-tp] td.committed") == [str(committed(index, p)) for p in range(PARTITIONS)]
        assert cells(page, "#lag tr[data-tp] td.lag") == [str(records_in(p) - committed(index, p))
                                                          for p in range(PARTITIONS)]


def test_pages_through_one_broker_show_the_whole_cluster(page, cluster_world, artifacts):
    brokers, console = cluster_world
    with ClusterClient(brokers.bootstrap) as client:
        leaders = set(client.leaders([(TOPIC, p) for p in range(PARTITIONS)]).values())
        coordinators = set(client.coordinators(GROUPS).values())
        controllers = {admin.describe_cluster(ClusterClient(brokers.bootstrap_of(i)).connect()).controller_id
                       for i in (1, 2, 3)}
    assert leaders == {1, 2, 3} and len(coordinators) >= 2  # broker 1 alone cannot answer
    check_pages(page, console, artifacts, "cluster")
    page.goto(console.url + "/")
    assert cells(page, "#brokers td:nth-child(1)") == ["1", "2", "3"]
    assert len(controllers) == 1
    assert f"controller {controllers.pop()}" in page.inner_text("body").lower()


def test_every_page_is_served_after_the_bootstrap_broker_is_killed(page, cluster_world, artifacts):
    brokers, console = cluster_world
    brokers.kill(1)
    paths = ["/", "/topics", f"/topics/{TOPIC}", "/groups", *(f"/groups/{g}" for g in GROUPS), "/tables", "/schemas"]
    deadline = time.monotonic() + 60
    while True:  # until broker 1's partitions and groups have moved (its ZooKeeper session expired)
        statuses = {}
        for path in paths:
            try:
                with urllib.request.urlopen(console.url + path, timeout=30) as response:
                    statuses[path] = response.status
            except urllib.error.HTTPError as exc:
                statuses[path] = exc.code
        if set(statuses.values()) == {200} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert set(statuses.values()) == {200}, statuses
    check_pages(page, console, artifacts, "cluster-after-kill")
    assert console.log().count(OUTAGE_LINE) <= 1, console.log()[-3000:]


def test_a_whole_outage_is_logged_once_and_tables_need_no_broker(cluster_world):
    brokers, console = cluster_world
    for broker_id in brokers.live():
        brokers.kill(broker_id)
    time.sleep(5)  # ten sample intervals
    with urllib.request.urlopen(console.url + "/tables", timeout=30) as response:
        assert response.status == 200
    log = console.log()
    assert log.count(OUTAGE_LINE) == 1 + log.count("console samples as 'console' work again"), log[-3000:]
