"""conf/grafana/topiclake-cluster.json: every series a panel queries is one the broker serves
(rendered from a real sample, with its cluster health), every cluster-health series has a panel,
and the file is a dashboard Grafana imports (its datasource an input chosen at import)."""

from __future__ import annotations

import json
import re

from prometheus_client.parser import text_string_to_metric_families

from topiclake.broker.leadership import ClusterHealth
from topiclake.broker.metrics import GroupOffsetSample, PartitionSample, Sample, render

from tests.support.paths import REPO

DASHBOARD = REPO / "conf" / "grafana" / "topiclake-cluster.json"
SERIES = re.compile(r"\b((?:kafka|topiclake)_[a-z_]+)")


def served() -> set[str]:
    """Every sample name /metrics serves with a partition, a group's lag and the cluster's health."""
    health = ClusterHealth(True, "connected", 1, 0, 4, 3, 6, 1, live_brokers=3, topics=2, partitions=6, offline=0,
                           preferred_imbalance=1)
    sample = Sample([PartitionSample("t", 0, 5, 500, 100, 1000, 1, 0, 5, 5)],
                    [GroupOffsetSample("g", "t", 0, 2, 3)], [], [], {}, {}, {}, {}, {}, health=health)
    text = render(sample, {("t", 0, 2): 1_700_000_000_000}, 1_700_000_010.0).decode()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_panel_queries_a_served_series_and_every_health_series_has_a_panel():
    dashboard = json.loads(DASHBOARD.read_text())
    queried = {name for panel in dashboard["panels"] for target in panel["targets"]
               for name in SERIES.findall(target["expr"])}
    names = served()
    assert queried <= names, queried - names
    health = {n for n in names if n.startswith(("kafka_controller_", "kafka_server_replicamanager_",
                                                "kafka_server_sessionexpirelistener_"))}
    assert len(health) == 13 and health <= queried, health - queried
    assert {"kafka_consumergroup_group_lag", "kafka_consumergroup_group_lag_seconds"} <= queried


def test_the_dashboard_imports_with_a_chosen_prometheus():
    dashboard = json.loads(DASHBOARD.read_text())
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["uid"] == "topiclake-cluster" and dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        assert panel["title"] and panel["description"] and panel["targets"]
        assert all(t["datasource"] == panel["datasource"] for t in panel["targets"])
