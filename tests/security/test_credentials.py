"""The credential store: salted, never plain; PLAIN logins check the PLAIN hash or a SCRAM one."""

from __future__ import annotations

import pytest

from topiclake.security.credentials import CredentialError, CredentialStore


def test_passwords_are_never_stored_and_verify(tmp_path):
    store = CredentialStore(tmp_path)
    store.set_password("alice", "SCRAM-SHA-256", "s3cret-password")
    store.set_password("bob", "PLAIN", "bob-password")
    text = store.path.read_text()
    assert "s3cret-password" not in text and "bob-password" not in text and "iterations=4096" in text
    assert store.verify_password("alice", "s3cret-password") and not store.verify_password("alice", "nope")
    assert store.verify_password("bob", "bob-password") and not store.verify_password("carol", "x")
    assert CredentialStore(tmp_path).get("alice", "SCRAM-SHA-512") is None
    assert store.delete("alice") and not store.delete("alice")


@pytest.mark.parametrize("args, message", [
    (("", "SCRAM-SHA-256", "pw"), "empty"), (("u", "SCRAM-SHA-1", "pw"), "unknown mechanism"),
    (("u", "PLAIN", ""), "password"), (("u", "PLAIN", "pw", 100), "minimum 4096")])
def test_bad_credentials_are_refused(tmp_path, args, message):
    with pytest.raises(CredentialError, match=message):
        CredentialStore(tmp_path).set_password(*args)
