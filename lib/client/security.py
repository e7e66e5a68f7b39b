"""ACLs and SCRAM users over a ClusterClient (any broker answers: they live in the shared
root), as kafka-acls.sh and kafka-configs.sh --entity-type users see them. Bindings and filters
are topiclake.security.acls's."""

from __future__ import annotations

import secrets
from typing import Iterable

from topiclake.security import scram
from topiclake.security.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType

from .client import ClusterClient
from .errors import check
from .results import ScramCredential


# ---------------------------------------------------------------------------------- ACLs
def _filter_fields(f: AclFilter) -> dict:
    return dict(resource_type_filter=int(f.resource_type), resource_name_filter=f.resource_name,
                pattern_type_filter=int(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
                operation=int(f.operation), permission_type=int(f.permission))


def _binding(resource, acl) -> AclBinding:
    return AclBinding(ResourceType(resource.resource_type), resource.resource_name,
                      PatternType(resource.pattern_type), acl.principal, acl.host, Operation(acl.operation),
                      Permission(acl.permission_type))


def create_acls(client: ClusterClient, bindings: Iterable[AclBinding]) -> None:
    from kio.schema.create_acls.v3 import request as req

    bindings = list(bindings)
    response = client.request_any(req.CreateAclsRequest(creations=tuple(
        req.AclCreation(resource_type=int(b.resource_type), resource_name=b.resource_name,
                        resource_pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                        operation=int(b.operation), permission_type=int(b.permission)) for b in bindings)))
    for b, r in zip(bindings, response.results):
        check(r.error_code, f"adding {b.describe()}", r.error_message)


def describe_acls(client: ClusterClient, f: AclFilter) -> list[AclBinding]:
    from kio.schema.describe_acls.v3 import request as req

    response = client.request_any(req.DescribeAclsRequest(**_filter_fields(f)))
    check(response.error_code, "listing ACLs", response.error_message)
    return [_binding(r, a) for r in response.resources for a in r.acls]


def delete_acls(client: ClusterClient, f: AclFilter) -> list[AclBinding]:
    """The bindings removed."""
    from kio.schema.delete_acls.v3 import request as req

    [result] = client.request_any(req.DeleteAclsRequest(filters=(req.DeleteAclsFilter(**_filter_fields(f)),))
                                  ).filter_results
    check(result.error_code, "removing ACLs", result.error_message)
    return [_binding(m, m) for m in result.matching_acls]


# ------------------------------------------------------------------------------ SCRAM users
def describe_users(client: ClusterClient, users: Iterable[str] | None = None) -> dict[str, list[ScramCredential]]:
    """user -> its SCRAM credentials (every user with one, or `users`)."""
    from kio.schema.describe_user_scram_credentials.v0 import request as req

    wanted = None if users is None else tuple(req.UserName(name=u) for u in users)
    response = client.request_any(req.DescribeUserScramCredentialsRequest(users=wanted))
    check(response.error_code, "listing users" if users is None else "describing users", response.error_message)
    return {r.user: [ScramCredential(scram.BY_CODE[c.mechanism].name, c.iterations) for c in r.credential_infos
                     if c.mechanism in scram.BY_CODE]
            for r in response.results if r.error_code.value == 0}


def _alter_users(client: ClusterClient, what: str, *, upsertions=(), deletions=()) -> None:
    from kio.schema.alter_user_scram_credentials.v0 import request as req

    response = client.request_any(req.AlterUserScramCredentialsRequest(deletions=tuple(deletions),
                                                                       upsertions=tuple(upsertions)))
    for r in response.results:
        check(r.error_code, f"{what} ({r.user})", r.error_message)


def set_user(client: ClusterClient, name: str, mechanisms: Iterable[str], password: str, iterations: int) -> None:
    """Create a SCRAM user or change its password: salted here, only the salted password is sent."""
    from kio.schema.alter_user_scram_credentials.v0 import request as req

    upsertions = []
    for m in mechanisms:
        mech, salt = scram.MECHANISMS[m], secrets.token_bytes(32)
        upsertions.append(req.ScramCredentialUpsertion(
            name=name, mechanism=mech.code, iterations=iterations, salt=salt,
            salted_password=mech.salted_password(password, salt, iterations)))
    _alter_users(client, f"setting user {name}", upsertions=upsertions)


def delete_user(client: ClusterClient, name: str, mechanisms: Iterable[str]) -> None:
    from kio.schema.alter_user_scram_credentials.v0 import request as req

    _alter_users(client, f"deleting user {name}", deletions=[
        req.ScramCredentialDeletion(name=name, mechanism=scram.MECHANISMS[m].code) for m in mechanisms])
