"""ApiVersions: the registry's routes are the answer, with the cluster features
(`features`): supported ranges (v3 leaves out those starting at 0, as Kafka's schema says) and
the finalized levels."""

from __future__ import annotations

from kio.schema.api_versions.v0 import response as v0
from kio.schema.api_versions.v4.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..features import FEATURES, FINALIZED_EPOCH
from ..wire import Request, has_field, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY


def _api_keys(entry_type: type) -> tuple:
    return tuple(entry_type(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
                 for r in REGISTRY.routes())


def unsupported_version_response() -> v0.ApiVersionsResponse:
    """The v0 answer to an ApiVersions version we do not serve (KIP-511)."""
    return v0.ApiVersionsResponse(error_code=ErrorCode.unsupported_version, api_keys=_api_keys(v0.ApiVersion))


@REGISTRY.route(ApiKey.API_VERSIONS, (0, 4))
async def api_versions(broker: BrokerContext, request: Request[ApiVersionsRequest]):
    cls = request.response_type
    features = {}
    if has_field(cls, "supported_features"):
        supported, finalized = nested(cls, "supported_features"), nested(cls, "finalized_features")
        features = dict(
            supported_features=tuple(supported(name=f.name, min_version=f.min_version, max_version=f.max_version)
                                     for f in FEATURES if request.api_version >= 4 or f.min_version > 0),
            finalized_features_epoch=FINALIZED_EPOCH,
            finalized_features=tuple(finalized(name=f.name, max_version_level=f.finalized,
                                               min_version_level=f.finalized) for f in FEATURES))
    return make(cls, error_code=ErrorCode.none, api_keys=_api_keys(nested(cls, "api_keys")),
                throttle_time=NO_THROTTLE, **features)
