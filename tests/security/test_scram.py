"""SCRAM against RFC 7677's worked example, and the server/client pair against each other."""

from __future__ import annotations

import base64

import pytest

from topiclake.security import scram

# RFC 7677 section 3: user "user", password "pencil".
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FINAL = (f"c=biws,r={CLIENT_NONCE}{SERVER_NONCE},p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential():
    return scram.credential_from_password(scram.SCRAM_SHA_256, "pencil", iterations=4096, salt=SALT)


def test_rfc7677_example_client_side():
    client = scram.ScramClient(scram.SCRAM_SHA_256, "user", "pencil", nonce=CLIENT_NONCE)
    assert client.first() == f"n,,n=user,r={CLIENT_NONCE}".encode()
    server_first = f"r={CLIENT_NONCE}{SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode()
    assert client.final(server_first).decode() == CLIENT_FINAL
    client.verify(SERVER_FINAL.encode())
    with pytest.raises(scram.ScramError, match="signature"):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


def test_rfc7677_example_server_side():
    server = scram.ScramServer(scram.SCRAM_SHA_256, {"user": rfc_credential()}.get, nonce=SERVER_NONCE)
    first = server.client_first(f"n,,n=user,r={CLIENT_NONCE}".encode())
    assert first.decode() == f"r={CLIENT_NONCE}{SERVER_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    assert server.client_final(CLIENT_FINAL.encode()).decode() == SERVER_FINAL
    assert server.complete


@pytest.mark.parametrize("mechanism", [scram.SCRAM_SHA_256, scram.SCRAM_SHA_512])
def test_wrong_password_unknown_user_and_broken_messages_fail(mechanism):
    credential = scram.credential_from_password(mechanism, "right")
    lookup = {"alice": credential}.get
    client = scram.ScramClient(mechanism, "alice", "wrong")
    server = scram.ScramServer(mechanism, lookup)
    with pytest.raises(scram.ScramError, match="invalid credentials"):
        server.client_final(client.final(server.client_first(client.first())))
    with pytest.raises(scram.ScramError, match="unknown user"):
        scram.ScramServer(mechanism, lookup).client_first(b"n,,n=bob,r=abc")
    for bad in (b"p=tls-unique,,n=alice,r=x", b"garbage", b"n,,n=alice", b"n,,m=ext,n=alice,r=x"):
        with pytest.raises(scram.ScramError):
            scram.ScramServer(mechanism, lookup).client_first(bad)
    good = scram.ScramClient(mechanism, "alice", "right")
    server = scram.ScramServer(mechanism, lookup)
    server.client_first(good.first())
    with pytest.raises(scram.ScramError, match="nonce"):
        server.client_final(b"c=biws,r=other,p=" + base64.b64encode(b"0" * 64))


def test_kafka_credential_format_round_trips_and_checks_passwords():
    credential = rfc_credential()
    text = credential.to_string()
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and text.endswith(",iterations=4096")
    assert scram.ScramCredential.from_string(text) == credential
    assert scram.password_matches(scram.SCRAM_SHA_256, credential, "pencil")
    assert not scram.password_matches(scram.SCRAM_SHA_256, credential, "pencil2")


def client_final_with_nonce(mechanism, password: str, server_first: bytes, nonce: str) -> bytes:
    """A client-final message carrying `nonce`, signed the way a client signs what it sends."""
    attrs = dict(part.split("=", 1) for part in server_first.decode().split(","))
    salted = mechanism.salted_password(password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = mechanism.hmac(salted, b"Client Key")
    without_proof = f"c=biws,r={nonce}"
    auth_message = f"n=alice,r={CLIENT_NONCE},{server_first.decode()},{without_proof}".encode()
    signature = mechanism.hmac(mechanism.hash(client_key), auth_message)
    return f"{without_proof},p={base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()}".encode()


@pytest.mark.parametrize("mechanism", [scram.SCRAM_SHA_256, scram.SCRAM_SHA_512])
def test_a_final_nonce_ending_with_the_servers_is_accepted_as_kafka_does(mechanism):
    """librdkafka before 2.6.1 (kcat 1.7.1 in Debian) puts the client nonce before the full nonce
    in its final message; Kafka 3.8.1+ accepts any nonce ending with the server's (endsWith), so a
    correctly signed one logs in. A nonce that does not end with the server's still fails."""
    lookup = {"alice": scram.credential_from_password(mechanism, "right")}.get
    server = scram.ScramServer(mechanism, lookup)
    server_first = server.client_first(f"n,,n=alice,r={CLIENT_NONCE}".encode())
    full_nonce = server_first.decode().split(",")[0][2:]
    server.client_final(client_final_with_nonce(mechanism, "right", server_first, CLIENT_NONCE + full_nonce))
    assert server.complete
    server = scram.ScramServer(mechanism, lookup)
    server_first = server.client_first(f"n,,n=alice,r={CLIENT_NONCE}".encode())
    with pytest.raises(scram.ScramError, match="nonce mismatch"):
        server.client_final(client_final_with_nonce(mechanism, "right", server_first, CLIENT_NONCE))
