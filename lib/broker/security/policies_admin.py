"""Which operations the cluster and config APIs need (KafkaApis / ControllerApis):
- DESCRIBE on the cluster: DescribeAcls, DescribeUserScramCredentials, DescribeLogDirs,
  ListPartitionReassignments, DescribeQuorum;
- ALTER on the cluster: CreateAcls, DeleteAcls, AlterUserScramCredentials, AlterReplicaLogDirs,
  ElectLeaders, AlterPartitionReassignments;
- DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster: DescribeClientQuotas, ListConfigResources /
  AlterClientQuotas;
- DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: DESCRIBE_CONFIGS / ALTER_CONFIGS on
  each resource (a topic, a group, or the cluster for broker resources);
- nothing: ApiVersions, SaslHandshake, SaslAuthenticate, DescribeCluster (whose
  cluster_authorized_operations are filled in when asked for).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from topiclake.security.acls import CLUSTER_NAME
from topiclake.security.acls import Operation as Op
from topiclake.security.acls import ResourceType

from ..api_keys import ApiKey
from ..wire import make, nested
from .policies import CLUSTER_DENIED, GROUP_DENIED, TOPIC_DENIED, blank, policy, replace, serve_allowed

_DENIED_TEXT = "Cluster authorization failed."


@policy(ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE)
async def unauthenticated(check, broker, request, call):
    return await call(request.body)


@policy(ApiKey.DESCRIBE_CLUSTER)
async def describe_cluster(check, broker, request, call):
    response = await call(request.body)
    if request.body.include_cluster_authorized_operations:
        response = replace(response, cluster_authorized_operations=check.operations(ResourceType.CLUSTER, CLUSTER_NAME))
    return response


def _cluster_only(api_keys: tuple[ApiKey, ...], operation: Op, refuse=None):
    """A policy: the whole request needs `operation` on the cluster."""

    async def cluster_policy(check, broker, request, call):
        if check.cluster(operation):
            return await call(request.body)
        if refuse is not None:
            return refuse(request)
        return blank(request.response_type, CLUSTER_DENIED, error_message=_DENIED_TEXT)

    return policy(*api_keys)(cluster_policy)


def _per_item(results_field: str, items_field: str, **fields_of):
    """An answer with one CLUSTER_AUTHORIZATION_FAILED result per request item."""

    def refuse(request):
        cls = request.response_type
        result_cls = nested(cls, results_field)
        return blank(cls, **{results_field: tuple(
            blank(result_cls, CLUSTER_DENIED, error_message=_DENIED_TEXT,
                  **{k: f(item) for k, f in fields_of.items()})
            for item in getattr(request.body, items_field))})

    return refuse


def _log_dirs_refusal(request):
    cls = request.response_type
    topic_cls = nested(cls, "results")
    part_cls = nested(topic_cls, "partitions")
    return blank(cls, results=tuple(make(topic_cls, topic_name=t.name, partitions=tuple(
        make(part_cls, partition_index=p, error_code=CLUSTER_DENIED) for p in t.partitions))
        for d in request.body.dirs for t in d.topics))


def _elect_refusal(request):
    cls = request.response_type
    topic_cls = nested(cls, "replica_election_results")
    part_cls = nested(topic_cls, "partition_result")
    results = tuple(make(topic_cls, topic=t.topic, partition_result=tuple(
        make(part_cls, partition_id=p, error_code=CLUSTER_DENIED, error_message=_DENIED_TEXT) for p in t.partitions))
        for t in request.body.topic_partitions or ())
    return blank(cls, CLUSTER_DENIED, replica_election_results=results)


def _scram_describe_refusal(request):
    """The error for each user asked about. Kafka's getErrorResponse also sets the top-level error,
    and confluent-kafka 2.x (librdkafka) crashes the process on such an answer (seen here: segfault,
    or munmap_chunk abort); per user, it reports CLUSTER_AUTHORIZATION_FAILED cleanly."""
    cls = request.response_type
    result_cls = nested(cls, "results")
    return blank(cls, ErrorCode.none, error_message=None, results=tuple(
        blank(result_cls, CLUSTER_DENIED, user=u.name, error_message=_DENIED_TEXT, credential_infos=())
        for u in request.body.users or ()))


_cluster_only((ApiKey.DESCRIBE_ACLS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.LIST_PARTITION_REASSIGNMENTS,
               ApiKey.DESCRIBE_QUORUM), Op.DESCRIBE)
_cluster_only((ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,), Op.DESCRIBE, _scram_describe_refusal)
_cluster_only((ApiKey.CREATE_ACLS,), Op.ALTER, _per_item("results", "creations"))
_cluster_only((ApiKey.DELETE_ACLS,), Op.ALTER, _per_item("filter_results", "filters", matching_acls=lambda _f: ()))
_cluster_only((ApiKey.ALTER_USER_SCRAM_CREDENTIALS,), Op.ALTER,
              _per_item("results", "upsertions", user=lambda u: u.name))
_cluster_only((ApiKey.ALTER_REPLICA_LOG_DIRS,), Op.ALTER, _log_dirs_refusal)
_cluster_only((ApiKey.ELECT_LEADERS,), Op.ALTER, _elect_refusal)
_cluster_only((ApiKey.ALTER_PARTITION_REASSIGNMENTS,), Op.ALTER)
_cluster_only((ApiKey.DESCRIBE_CLIENT_QUOTAS, ApiKey.LIST_CONFIG_RESOURCES), Op.DESCRIBE_CONFIGS)


def _quotas_refusal(request):
    cls = request.response_type
    entry_cls = nested(cls, "entries")
    entity_cls = nested(entry_cls, "entity")
    return blank(cls, entries=tuple(make(entry_cls, error_code=CLUSTER_DENIED, error_message=_DENIED_TEXT, entity=tuple(
        make(entity_cls, entity_type=x.entity_type, entity_name=x.entity_name) for x in e.entity))
        for e in request.body.entries))


_cluster_only((ApiKey.ALTER_CLIENT_QUOTAS,), Op.ALTER_CONFIGS, _quotas_refusal)


# ===================================================================== configs
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32


def _config_resource_check(check, resource, operation: Op) -> ErrorCode:
    rtype = int(resource.resource_type)
    if rtype == TOPIC:
        return ErrorCode.none if check.topic(operation, resource.resource_name) else TOPIC_DENIED
    if rtype == GROUP:
        return ErrorCode.none if check.group(operation, resource.resource_name) else GROUP_DENIED
    if rtype in (BROKER, BROKER_LOGGER, CLIENT_METRICS):
        return ErrorCode.none if check.cluster(operation) else CLUSTER_DENIED
    return ErrorCode.none  # an unknown type: the handler refuses it


def _config_policy(api_keys: tuple[ApiKey, ...], operation: Op, results_field: str, **extra):
    async def config_policy(check, broker, request, call):
        body, cls = request.body, request.response_type
        result_cls = nested(cls, results_field)
        codes = [_config_resource_check(check, r, operation) for r in body.resources]
        kept = tuple(r for r, code in zip(body.resources, codes) if code == ErrorCode.none)
        denied = tuple(blank(result_cls, code, error_message="Authorization failed.", resource_type=r.resource_type,
                             resource_name=r.resource_name, **extra)
                       for r, code in zip(body.resources, codes) if code != ErrorCode.none)
        return await serve_allowed(call, body, kept, "resources", cls, denied, results_field)

    return policy(*api_keys)(config_policy)


_config_policy((ApiKey.DESCRIBE_CONFIGS,), Op.DESCRIBE_CONFIGS, "results", configs=())
_config_policy((ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS), Op.ALTER_CONFIGS, "responses")
