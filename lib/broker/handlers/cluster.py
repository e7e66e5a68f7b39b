"""DescribeCluster (60): the live brokers and the controller (`leadership`)."""

from __future__ import annotations

from kio.schema.describe_cluster.v2.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..constants import AUTHORIZED_OPERATIONS_OMITTED
from ..context import BrokerContext
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY


@REGISTRY.route(ApiKey.DESCRIBE_CLUSTER, (0, 2))
async def describe_cluster(broker: BrokerContext, request: Request[DescribeClusterRequest]):
    cls = request.response_type
    leadership = broker.leadership
    brokers = tuple(make(nested(cls, "brokers"), broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack,
                         is_fenced=False) for b in leadership.brokers(request.session.listener))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, endpoint_type=1,
                cluster_id=broker.cluster_id, controller_id=leadership.controller_id(), brokers=brokers,
                cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED)
