"""SaslHandshake (17) and SaslAuthenticate (36): thin over the broker's SaslService
(security/sasl.py), which keeps the exchange on the connection's session."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..wire import Request, make
from .registry import REGISTRY

_NO_SESSION_LIFETIME = datetime.timedelta(0)  # no re-authentication (KIP-368) is asked for


@REGISTRY.route(ApiKey.SASL_HANDSHAKE, (0, 1))
async def sasl_handshake(broker: BrokerContext, request: Request[SaslHandshakeRequest]):
    session, sasl = request.session, broker.security.sasl
    if session.listener not in ("SASL_PLAINTEXT", "SASL_SSL"):
        code = ErrorCode.illegal_sasl_state  # SASL is not enabled on this listener
    else:
        code, _message = sasl.handshake(session, request.body.mechanism, request.api_version)
    return make(request.response_type, error_code=code, mechanisms=tuple(sasl.mechanisms))


@REGISTRY.route(ApiKey.SASL_AUTHENTICATE, (0, 2))
async def sasl_authenticate(broker: BrokerContext, request: Request[SaslAuthenticateRequest]):
    code, message, answer = await broker.security.sasl.authenticate(request.session, request.body.auth_bytes)
    return make(request.response_type, error_code=code, error_message=message, auth_bytes=answer,
                session_lifetime=_NO_SESSION_LIFETIME)
