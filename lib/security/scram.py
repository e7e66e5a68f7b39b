"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: SCRAM-SHA-256 and SCRAM-SHA-512, no channel
binding, Kafka's credential format.

A stored credential is Kafka's ScramCredential: salt, StoredKey = H(ClientKey), ServerKey and the
iteration count, written as Kafka's ScramCredentialUtils does
(`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`). The password itself is never
kept: `credential_from_password` derives the keys, and a login proves knowledge of ClientKey.

`ScramServer` is one server side of an exchange (client-first -> server-first, client-final ->
server-final); `ScramClient` the client side (the CLI's protocol client). Both raise ScramError
for anything that does not follow the RFC or fails the proof.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Callable

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations
MAX_ITERATIONS = 16384  # Kafka's ScramMechanism.maxIterations
DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class Mechanism:
    name: str  # SASL mechanism name
    hash_name: str  # hashlib name
    code: int  # Kafka's ScramMechanism type byte (DescribeUserScramCredentials, AlterUserScramCredentials)

    def hash(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """Hi(Normalize(password), salt, i): PBKDF2 with HMAC of this hash (RFC 5802 2.2).
        Kafka does not SASLprep; neither do we (ASCII passwords are unaffected either way)."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


SCRAM_SHA_256 = Mechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = Mechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_CODE = {m.code: m for m in MECHANISMS.values()}


class ScramError(Exception):
    """A malformed message or a failed proof."""


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_string(self) -> str:
        """Kafka's ScramCredentialUtils.credentialToString."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},"
                f"server_key={_b64(self.server_key)},iterations={self.iterations}")

    @classmethod
    def from_string(cls, text: str) -> "ScramCredential":
        fields = dict(part.split("=", 1) for part in text.split(","))
        try:
            return cls(_unb64(fields["salt"]), _unb64(fields["stored_key"]), _unb64(fields["server_key"]),
                       int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from None


def credential_from_salted_password(mechanism: Mechanism, salt: bytes, salted: bytes,
                                    iterations: int) -> ScramCredential:
    client_key = mechanism.hmac(salted, b"Client Key")
    server_key = mechanism.hmac(salted, b"Server Key")
    return ScramCredential(salt, mechanism.hash(client_key), server_key, iterations)


def credential_from_password(mechanism: Mechanism, password: str, *, iterations: int = DEFAULT_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted_password(mechanism, salt, mechanism.salted_password(password, salt, iterations),
                                           iterations)


def password_matches(mechanism: Mechanism, credential: ScramCredential, password: str) -> bool:
    """Whether `password` derives `credential` (PLAIN logins and HTTP basic auth check this)."""
    salted = mechanism.salted_password(password, credential.salt, credential.iterations)
    return hmac.compare_digest(mechanism.hash(mechanism.hmac(salted, b"Client Key")), credential.stored_key)


# -------------------------------------------------------------------------------- messages
def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode(), validate=True)


def _attributes(message: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"invalid SCRAM attribute {part!r}")
        out.setdefault(part[0], part[2:])
    return out


def _unescape_name(name: str) -> str:
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("invalid escape in SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," (or "y,,": the client could bind but thinks we cannot)
    user: str
    nonce: str
    bare: str  # client-first-message-bare, part of the AuthMessage
    extensions: dict[str, str]


def parse_client_first(message: str) -> ClientFirst:
    parts = message.split(",", 2)
    if len(parts) != 3:
        raise ScramError("invalid SCRAM client-first message")
    cbind, authzid, bare = parts
    if cbind.startswith("p="):
        raise ScramError("channel binding is not supported")
    if cbind not in ("n", "y"):
        raise ScramError(f"invalid SCRAM gs2 header {cbind!r}")
    attrs = _attributes(bare)
    if "m" in attrs:
        raise ScramError("mandatory SCRAM extensions are not supported")
    if "n" not in attrs or "r" not in attrs or not attrs["r"]:
        raise ScramError("SCRAM client-first message lacks the user name or nonce")
    user = _unescape_name(attrs["n"])
    if authzid and authzid != f"a={_escape_name(user)}":
        raise ScramError("an authorization id different from the user name is not supported")
    extensions = {k: v for k, v in (p.split("=", 1) for p in bare.split(",") if "=" in p) if len(k) > 1}
    return ClientFirst(f"{cbind},{authzid},", user, attrs["r"], bare, extensions)


class ScramServer:
    """The server side of one SCRAM exchange. `lookup(user)` gives the user's credential for this
    mechanism, or None: an unknown user fails at the client-first message, as in Kafka's
    ScramSaslServer."""

    def __init__(self, mechanism: Mechanism, lookup: Callable[[str], ScramCredential | None],
                 nonce: str | None = None):
        self.mechanism = mechanism
        self._nonce_suffix = nonce  # fixed only by tests (RFC 7677's example)
        self._lookup = lookup
        self.user: str | None = None
        self._first: ClientFirst | None = None
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.complete = False

    def client_first(self, data: bytes) -> bytes:
        first = parse_client_first(_text(data))
        if first.extensions.get("tokenauth", "false").lower() == "true":
            raise ScramError("delegation tokens are not supported")
        credential = self._lookup(first.user)
        self.user = first.user
        if credential is None:
            raise ScramError(f"unknown user {first.user!r}")
        self._first, self._credential = first, credential
        self._nonce = first.nonce + (self._nonce_suffix or secrets.token_urlsafe(24))
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, data: bytes) -> bytes:
        if self._first is None or self.complete:
            raise ScramError("unexpected SCRAM client-final message")
        message = _text(data)
        without_proof, sep, proof_text = message.rpartition(",p=")
        if not sep:
            raise ScramError("SCRAM client-final message has no proof")
        attrs = _attributes(without_proof)
        # Kafka's ScramSaslServer (3.8.1+) checks that the nonce ENDS with the server's: librdkafka
        # before 2.6.1 (kcat 1.7.1 in Debian) sends the client nonce twice in its final message, and
        # Kafka before 3.8.1 did not check the nonce at all. The proof still covers what was sent.
        if not attrs.get("r", "").endswith(self._nonce):
            raise ScramError("SCRAM nonce mismatch")
        try:
            binding = _unb64(attrs.get("c", ""))
            proof = _unb64(proof_text)
        except ValueError:
            raise ScramError("invalid base64 in SCRAM client-final message") from None
        if binding.decode(errors="replace") != self._first.gs2_header:
            raise ScramError("SCRAM channel binding mismatch")
        auth_message = f"{self._first.bare},{self._server_first},{without_proof}".encode()
        cred, mech = self._credential, self.mechanism
        signature = mech.hmac(cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid SCRAM proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(mech.hash(client_key), cred.stored_key):
            raise ScramError("invalid credentials")
        self.complete = True
        return f"v={_b64(mech.hmac(cred.server_key, auth_message))}".encode()


class ScramClient:
    """The client side of one SCRAM exchange."""

    def __init__(self, mechanism: Mechanism, user: str, password: str, nonce: str | None = None):
        self.mechanism = mechanism
        self.password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={_escape_name(user)},r={self._nonce}"
        self._auth_message = b""
        self._server_key = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        message = _text(server_first)
        attrs = _attributes(message)
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        nonce, salt, iterations = attrs.get("r", ""), _unb64(attrs.get("s", "")), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or iterations < 1:
            raise ScramError("invalid SCRAM server-first message")
        mech = self.mechanism
        salted = mech.salted_password(self.password, salt, iterations)
        client_key = mech.hmac(salted, b"Client Key")
        without_proof = f"c={_b64(b'n,,')},r={nonce}"
        self._auth_message = f"{self._bare},{message},{without_proof}".encode()
        signature = mech.hmac(mech.hash(client_key), self._auth_message)
        self._server_key = mech.hmac(salted, b"Server Key")
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        attrs = _attributes(_text(server_final))
        if "e" in attrs:
            raise ScramError(f"server refused: {attrs['e']}")
        expected = self.mechanism.hmac(self._server_key, self._auth_message)
        if not hmac.compare_digest(_unb64(attrs.get("v", "")), expected):
            raise ScramError("the server's signature does not match: not the server that holds this credential")


def _text(data: bytes) -> str:
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None
