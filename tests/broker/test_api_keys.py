"""API keys by name (`ApiKey`, Kafka's ApiKeys): the enum names Kafka's keys exactly, what the
broker advertises in ApiVersions is the same table it was when the keys were bare numbers, and each
handler's parameters are typed with the kio request of the API it serves."""

from __future__ import annotations

import typing

import pytest
from kio.schema.api_versions.v3 import request as av_req
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from topiclake.broker.api_keys import ApiKey
from topiclake.broker.context import BrokerContext
from topiclake.broker.handlers import REGISTRY
from topiclake.broker.wire import Request

# ApiVersions v3 as the broker answered it before the keys had names: Kafka's API name ->
# (min version, max version). Named through kio's own key table, so this holds the enum to account.
ADVERTISED = {
    "produce": (3, 13), "fetch": (4, 18), "list_offsets": (1, 11), "metadata": (0, 13),
    "offset_commit": (2, 10), "offset_fetch": (1, 10), "find_coordinator": (0, 6), "join_group": (0, 9),
    "heartbeat": (0, 4), "leave_group": (0, 5), "sync_group": (0, 5), "describe_groups": (0, 6),
    "list_groups": (0, 5), "sasl_handshake": (0, 1), "api_versions": (0, 4), "create_topics": (2, 7),
    "delete_topics": (1, 6), "delete_records": (0, 2), "init_producer_id": (0, 5),
    "offset_for_leader_epoch": (2, 4),  # KIP-320: consumers validate positions after a leader change
    "add_partitions_to_txn": (0, 5), "add_offsets_to_txn": (0, 4), "end_txn": (0, 5),
    "write_txn_markers": (1, 1),  # between the brokers of a cluster (issue 18)
    "txn_offset_commit": (0, 5), "describe_acls": (1, 3), "create_acls": (1, 3), "delete_acls": (1, 3),
    "describe_configs": (1, 4), "alter_configs": (0, 2), "alter_replica_log_dirs": (1, 2),
    "describe_log_dirs": (1, 4), "sasl_authenticate": (0, 2), "create_partitions": (0, 3),
    "delete_groups": (0, 2), "elect_leaders": (0, 2), "incremental_alter_configs": (0, 1),
    "alter_partition_reassignments": (0, 1), "list_partition_reassignments": (0, 0), "offset_delete": (0, 0),
    "describe_client_quotas": (0, 1), "alter_client_quotas": (0, 1), "describe_user_scram_credentials": (0, 0),
    "alter_user_scram_credentials": (0, 0), "describe_quorum": (0, 2), "describe_cluster": (0, 2),
    "describe_producers": (0, 0), "describe_transactions": (0, 0), "list_transactions": (0, 2),
    "consumer_group_heartbeat": (0, 1), "consumer_group_describe": (0, 1), "list_config_resources": (0, 1),
    "describe_topic_partitions": (0, 0), "share_group_heartbeat": (1, 1), "share_group_describe": (1, 1),
    "share_fetch": (1, 2), "share_acknowledge": (1, 2), "describe_share_group_offsets": (0, 1),
    "alter_share_group_offsets": (0, 0), "delete_share_group_offsets": (0, 0),
    # the share coordinator's APIs, between the brokers of a cluster (issue 18)
    "initialize_share_group_state": (0, 0), "read_share_group_state": (0, 0), "write_share_group_state": (0, 1),
    "delete_share_group_state": (0, 0), "read_share_group_state_summary": (0, 1),
}


def test_every_kafka_api_key_has_its_kafka_name():
    assert {key.value: key.name.lower() for key in ApiKey} == api_key_map


@pytest.mark.parametrize("key", [ApiKey.PRODUCE, ApiKey.JOIN_GROUP, ApiKey.API_VERSIONS, ApiKey.SHARE_FETCH])
def test_a_named_key_is_its_number(key):
    assert key == int(key) and hash(key) == hash(int(key)) and f"{key}" == str(int(key))


def test_the_registry_routes_by_named_key():
    assert all(type(route.api_key) is ApiKey for route in REGISTRY.routes())
    with pytest.raises(ValueError, match="api key 4242"):
        REGISTRY.route(4242, (0, 0))


def test_api_versions_answer_is_unchanged(broker):
    with broker.client() as c:
        response = c.request(av_req.ApiVersionsRequest(client_software_name="test", client_software_version="1"))
    assert response.error_code == ErrorCode.none
    assert [type(k.api_key) for k in response.api_keys] == [int] * len(response.api_keys)
    advertised = {api_key_map[k.api_key]: (k.min_version, k.max_version) for k in response.api_keys}
    assert advertised == ADVERTISED
    assert [k.api_key for k in response.api_keys] == sorted(k.api_key for k in response.api_keys)


@pytest.mark.parametrize("route", REGISTRY.routes(), ids=lambda r: r.name)
def test_every_handler_is_typed_with_the_newest_request_it_serves(route):
    hints = typing.get_type_hints(route.handler)
    assert hints["broker"] is BrokerContext
    assert typing.get_origin(hints["request"]) is Request
    [body] = typing.get_args(hints["request"])
    assert (body.__api_key__, body.__version__) == (route.api_key, route.max_version)
