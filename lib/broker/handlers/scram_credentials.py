"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) over the credential store
in shared storage (security.credentials), with the checks of Kafka's ScramControlManager. Only
SCRAM credentials travel here (a PLAIN user is set with `topiclake users set --data`)."""

from __future__ import annotations

import logging

from kio.schema.alter_user_scram_credentials.v0.request import AlterUserScramCredentialsRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest
from kio.schema.errors import ErrorCode

from topiclake.security import scram
from topiclake.security.credentials import CredentialError, check_iterations, check_user_name

from ..api_keys import ApiKey
from ..context import BrokerContext
from ..wire import Request, make, nested
from ._common import NO_THROTTLE
from .registry import REGISTRY

log = logging.getLogger(__name__)


@REGISTRY.route(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, (0, 0))
async def describe_user_scram_credentials(broker: BrokerContext, request: Request[DescribeUserScramCredentialsRequest]):
    cls = request.response_type
    result_cls = nested(cls, "results")
    info_cls = nested(result_cls, "credential_infos")
    users = broker.security.credentials.users()
    scram_users = {u: {m: c for m, c in creds.items() if m in scram.MECHANISMS} for u, creds in users.items()}
    wanted = [u.name for u in request.body.users or ()] or sorted(u for u, c in scram_users.items() if c)
    results = []
    for name in dict.fromkeys(wanted):
        code, message, infos = ErrorCode.none, None, ()
        if wanted.count(name) > 1:
            code, message = ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials for the same user twice"
        elif not scram_users.get(name):
            code, message = ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist"
        else:
            infos = tuple(make(info_cls, mechanism=scram.MECHANISMS[m].code, iterations=c.iterations)
                          for m, c in sorted(scram_users[name].items()))
        results.append(make(result_cls, user=name, error_code=code, error_message=message, credential_infos=infos))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results))


def _mechanism(code: int) -> scram.Mechanism:
    try:
        return scram.BY_CODE[int(code)]
    except KeyError:
        raise _Refused(ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {code}") from None


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@REGISTRY.route(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0))
async def alter_user_scram_credentials(broker: BrokerContext, request: Request[AlterUserScramCredentialsRequest]):
    cls = request.response_type
    result_cls = nested(cls, "results")
    store = broker.security.credentials
    body = request.body
    existing = store.users()
    keys = [(d.name, int(d.mechanism)) for d in body.deletions] + [(u.name, int(u.mechanism)) for u in body.upsertions]
    errors: dict[str, tuple[ErrorCode, str]] = {}
    upserts, deletions = {}, set()
    for kind, items in (("delete", body.deletions), ("upsert", body.upsertions)):
        for item in items:
            if item.name in errors:
                continue
            try:
                check_user_name(item.name)
                if keys.count((item.name, int(item.mechanism))) > 1:
                    raise _Refused(ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the "
                                                                 "same request")
                mech = _mechanism(item.mechanism)
                if kind == "delete":
                    if mech.name not in existing.get(item.name, {}):
                        raise _Refused(ErrorCode.resource_not_found,
                                       "Attempt to delete a user credential that does not exist")
                    deletions.add((item.name, mech.name))
                else:
                    check_iterations(item.iterations)
                    if not item.salt or not item.salted_password:
                        raise _Refused(ErrorCode.unacceptable_credential, "salt and salted password must not be empty")
                    upserts[(item.name, mech.name)] = scram.credential_from_salted_password(
                        mech, item.salt, item.salted_password, item.iterations)
            except CredentialError as exc:
                errors[item.name] = (ErrorCode.unacceptable_credential, str(exc))
            except _Refused as exc:
                errors[item.name] = (exc.code, str(exc))
    store.alter({k: v for k, v in upserts.items() if k[0] not in errors},
                {k for k in deletions if k[0] not in errors})
    results = []
    for name in dict.fromkeys(name for name, _ in keys):
        code, message = errors.get(name, (ErrorCode.none, None))
        if code == ErrorCode.none:
            log.info("SCRAM credentials of user %r altered by %s", name, request.session.principal)
        results.append(make(result_cls, user=name, error_code=code, error_message=message))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))
