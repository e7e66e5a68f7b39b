"""A metadata change the store refused (lib/broker/connection.py answers it with
wire.entries_failed): every entry that had succeeded carries the error and a message naming it,
entries that had failed keep their own error, and a DeleteAcls filter lists no ACL as deleted
(Kafka answers a failed filter with no matching ACLs)."""

from __future__ import annotations

from kio.schema.create_topics.v7 import response as create
from kio.schema.delete_acls.v3 import response as delete_acls
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32

from topiclake.broker import wire
from topiclake.broker.handlers._common import NO_THROTTLE

REFUSAL = "the store refused the change: AccessDenied"


def _matching_acl(name: str) -> delete_acls.DeleteAclsMatchingAcl:
    return delete_acls.DeleteAclsMatchingAcl(
        error_code=ErrorCode.none, error_message=None, resource_type=i8(2), resource_name=name,
        pattern_type=i8(3), principal="User:alice", host="*", operation=i8(3), permission_type=i8(3))


def test_a_refused_delete_acls_lists_no_acl_as_deleted():
    response = delete_acls.DeleteAclsResponse(throttle_time=NO_THROTTLE, filter_results=(
        delete_acls.DeleteAclsFilterResult(error_code=ErrorCode.none, error_message=None,
                                           matching_acls=(_matching_acl("orders"), _matching_acl("payments"))),
        delete_acls.DeleteAclsFilterResult(error_code=ErrorCode.invalid_request, error_message="bad filter",
                                           matching_acls=()),
    ))
    failed = wire.entries_failed(response, ErrorCode.unknown_server_error, REFUSAL)
    refused, own = failed.filter_results
    assert refused.error_code == ErrorCode.unknown_server_error and refused.error_message == REFUSAL, refused
    assert refused.matching_acls == (), refused
    assert own == response.filter_results[1]  # its own error, untouched


def test_a_refused_create_topics_names_each_topic():
    def topic(name: str, code: ErrorCode) -> create.CreatableTopicResult:
        return create.CreatableTopicResult(name=name, topic_id=None, error_code=code, error_message=None,
                                           topic_config_error_code=i16(0), num_partitions=i32(1), replication_factor=i16(1), configs=())
    response = create.CreateTopicsResponse(throttle_time=NO_THROTTLE, topics=(
        topic("orders", ErrorCode.none), topic("taken", ErrorCode.topic_already_exists)))
    failed = wire.entries_failed(response, ErrorCode.unknown_server_error, REFUSAL)
    orders, taken = failed.topics
    assert orders.error_code == ErrorCode.unknown_server_error and orders.error_message == f"orders: {REFUSAL}"
    assert taken.error_code == ErrorCode.topic_already_exists and taken.error_message is None
