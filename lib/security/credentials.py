"""User credentials in shared storage: <root>/cluster/credentials.json.

Kafka keeps SCRAM credentials as UserScramCredentialRecords in its metadata log; here they are
one JSON file (a `ConfigStore`: flock + atomic writes, created mode 0600), user -> mechanism ->
Kafka's credential string (`salt=..,stored_key=..,server_key=..,iterations=..`). Nothing in it is
a password: SCRAM keeps only the salted keys (RFC 5802), and a PLAIN user's password is kept the
same way (a SCRAM-SHA-512 credential under the name PLAIN), so a PLAIN login, HTTP basic auth to
the schema registry, and a SCRAM login all check a salted hash.

A PLAIN login (or basic auth) accepts the user's PLAIN credential, or, for a user set only for
SCRAM, any of its SCRAM credentials: one password per user, whatever the mechanism.

The broker reads this file on every login (a stat, then a cached parse), so users set by
`topiclake users set --data` while it runs take effect at once.
"""

from __future__ import annotations

from pathlib import Path

from topiclake.segments.config_store import ConfigStore
from topiclake.segments.storage import StorageLayout

from . import scram

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, scram.SCRAM_SHA_256.name, scram.SCRAM_SHA_512.name)
_PLAIN_HASH = scram.SCRAM_SHA_512  # how a PLAIN password is salted and hashed


class CredentialError(ValueError):
    """A credential that cannot be stored (unknown mechanism, bad iterations, empty name)."""


def credentials_path(root: str | Path) -> Path:
    return StorageLayout(root).cluster_dir / "credentials.json"


def _mechanism(name: str) -> scram.Mechanism:
    if name == PLAIN:
        return _PLAIN_HASH
    try:
        return scram.MECHANISMS[name]
    except KeyError:
        raise CredentialError(f"unknown mechanism {name!r}: one of {', '.join(MECHANISMS)}") from None


def check_user_name(user: str) -> None:
    if not user:
        raise CredentialError("user name must not be empty")


def check_iterations(iterations: int) -> None:
    if iterations < scram.MIN_ITERATIONS:
        raise CredentialError(f"iterations {iterations} is less than the minimum {scram.MIN_ITERATIONS}")
    if iterations > scram.MAX_ITERATIONS:
        raise CredentialError(f"iterations {iterations} is more than the maximum {scram.MAX_ITERATIONS}")


class CredentialStore:
    def __init__(self, root: str | Path):
        self._store = ConfigStore(credentials_path(root))

    @property
    def path(self) -> Path:
        return self._store.path

    def users(self) -> dict[str, dict[str, scram.ScramCredential]]:
        """user -> mechanism -> credential."""
        return {user: {mech: scram.ScramCredential.from_string(text) for mech, text in creds.items()}
                for user, creds in self._store.all().items()}

    def get(self, user: str, mechanism: str) -> scram.ScramCredential | None:
        text = self._store.get(user).get(mechanism)
        return None if text is None else scram.ScramCredential.from_string(text)

    def set_password(self, user: str, mechanism: str, password: str,
                     iterations: int = scram.DEFAULT_ITERATIONS) -> scram.ScramCredential:
        check_user_name(user)
        check_iterations(iterations)
        if not password:
            raise CredentialError("password must not be empty")
        credential = scram.credential_from_password(_mechanism(mechanism), password, iterations=iterations)
        self.put(user, mechanism, credential)
        return credential

    def put(self, user: str, mechanism: str, credential: scram.ScramCredential) -> None:
        _mechanism(mechanism)
        self._store.update(user, {mechanism: credential.to_string()})

    def alter(self, upserts: dict[tuple[str, str], scram.ScramCredential], deletions: set[tuple[str, str]]) -> None:
        """Several users' changes (AlterUserScramCredentials); each user's in one atomic write."""
        for user in sorted({u for u, _ in upserts} | {u for u, _ in deletions}):
            changes: dict[str, str | None] = {m: None for u, m in deletions if u == user}
            changes.update({m: c.to_string() for (u, m), c in upserts.items() if u == user})
            self._store.update(user, changes)

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove one mechanism's credential, or (None) every credential of the user; False if
        there was nothing to remove."""
        current = self._store.get(user)
        doomed = list(current) if mechanism is None else [m for m in current if m == mechanism]
        if not doomed:
            return False
        self._store.update(user, {m: None for m in doomed})
        return True

    def verify_password(self, user: str, password: str) -> bool:
        """A PLAIN login or HTTP basic auth: the user's PLAIN credential, else its SCRAM ones."""
        creds = self._store.get(user)
        if PLAIN in creds:
            candidates = [(PLAIN, creds[PLAIN])]
        else:
            candidates = [(m, t) for m, t in creds.items() if m in scram.MECHANISMS]
        return any(scram.password_matches(_mechanism(m), scram.ScramCredential.from_string(t), password)
                   for m, t in candidates)
