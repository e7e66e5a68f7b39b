"""Kafka's tools and kcat against a secured topiclake broker (one listener of each kind):
kafka-acls over a SASL listener, the ACLs it sets judged by kcat (librdkafka 2.0.2 from Debian,
whose SCRAM client repeats its nonce: Kafka accepts that, so does the broker), and the README's
client-properties examples, each used as written by Kafka's kafka-topics and by `topiclake`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.secure_broker import SecureBroker, make_certificates, security_toml

pytestmark = pytest.mark.slow

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
USERS = {"alice": "alice-secret", "bob": "bob-secret"}  # alice: the README's user, a super user here


@pytest.fixture(scope="module")
def secure_peer_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secure-peers")
    certs = make_certificates(tmp / "certs")
    toml = security_toml(certs, authorizer='"acl"', super_users=f'["User:alice", "{certs.client_principal}"]')
    proc = SecureBroker(tmp, PROTOCOLS, toml, users=USERS).start()
    proc.certs = certs
    try:
        yield proc
    finally:
        proc.stop()


def sasl_properties(path: Path, user: str, mechanism: str = "SCRAM-SHA-512") -> Path:
    password = USERS[user]
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
                    f'username="{user}" password="{password}";\n')
    return path


def kcat(secure_peer_broker, user: str, *args: str, password: str | None = None, mechanism: str = "SCRAM-SHA-512",
         input: str | None = None, metadata_timeout_s: int = 15) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", "-b", secure_peer_broker.address("SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
                           "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}", "-X",
                           f"sasl.password={password or USERS[user]}", "-m", str(metadata_timeout_s), *args],
                          input=input, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_kcat_logs_in_and_a_wrong_password_does_not(secure_peer_broker, mechanism):
    listed = kcat(secure_peer_broker, "bob", "-L", mechanism=mechanism)
    assert listed.returncode == 0, listed.stderr
    assert f"broker 0 at {secure_peer_broker.address('SASL_PLAINTEXT')}" in listed.stdout
    wrong = kcat(secure_peer_broker, "bob", "-L", mechanism=mechanism, password="not-it", metadata_timeout_s=2)
    assert wrong.returncode != 0 and "Authentication failed" in wrong.stderr


def test_kafka_acls_over_sasl_judged_by_kcat(kafka_tools, secure_peer_broker, tmp_path):
    admin = ("--bootstrap-server", secure_peer_broker.address("SASL_PLAINTEXT"), "--command-config",
             str(sasl_properties(tmp_path / "alice.properties", "alice")))
    kafka_tools("kafka-topics", *admin, "--create", "--topic", "orders", "--partitions", "1")
    kafka_tools("kafka-topics", *admin, "--create", "--topic", "secret-plans", "--partitions", "1")
    added = kafka_tools("kafka-acls", *admin, "--add", "--allow-principal", "User:bob", "--producer", "--topic",
                        "orders")
    assert "(principal=User:bob, host=*, operation=WRITE, permissionType=ALLOW)" in added
    kafka_tools("kafka-acls", *admin, "--add", "--allow-principal", "User:bob", "--consumer", "--topic", "orders",
                "--group", "bob-readers")
    kafka_tools("kafka-acls", *admin, "--add", "--deny-principal", "User:bob", "--operation", "All", "--topic",
                "secret", "--resource-pattern-type", "prefixed")
    listed = kafka_tools("kafka-acls", *admin, "--list", "--principal", "User:bob")
    assert sorted(re.findall(r"operation=(\w+), permissionType=(\w+)", listed)) == sorted(
        [("WRITE", "ALLOW"), ("DESCRIBE", "ALLOW"), ("CREATE", "ALLOW"), ("READ", "ALLOW"), ("READ", "ALLOW"),
         ("ALL", "DENY")])
    assert "ResourcePattern(resourceType=TOPIC, name=secret, patternType=PREFIXED)" in listed

    produced = kcat(secure_peer_broker, "bob", "-P", "-t", "orders", input="o1\no2\no3\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat(secure_peer_broker, "bob", "-G", "bob-readers", "-o", "beginning", "-e", "orders")
    assert consumed.returncode == 0 and consumed.stdout.split() == ["o1", "o2", "o3"], consumed.stderr
    denied = kcat(secure_peer_broker, "bob", "-P", "-t", "secret-plans", input="x\n")
    assert denied.returncode != 0 and "Topic authorization failed" in denied.stderr
    other_group = kcat(secure_peer_broker, "bob", "-G", "someone-elses", "-o", "beginning", "-e", "orders")
    assert other_group.returncode != 0 and "FindCoordinator response error: Authorization failed" in other_group.stderr

    kafka_tools("kafka-acls", *admin, "--remove", "--force", "--allow-principal", "User:bob", "--operation", "Write",
                "--topic", "orders")
    after = kcat(secure_peer_broker, "bob", "-P", "-t", "orders", input="o4\n")
    assert after.returncode != 0 and "Topic authorization failed" in after.stderr


def readme_examples() -> dict[str, str]:
    """docs/SECURITY.md's client-properties blocks, by security.protocol."""
    readme = (REPO / "docs" / "SECURITY.md").read_text()
    section = readme.split("<!-- client-properties examples", 1)[1].split("<!-- end of client-properties", 1)[0]
    blocks = re.findall(r"```properties\n(.*?)```", section, re.S)
    return {re.search(r"^security\.protocol=(\S+)$", b, re.M).group(1): b for b in blocks}


def test_readme_client_properties_examples_work_as_written(kafka_tools, secure_peer_broker, tmp_path):
    examples = readme_examples()
    assert sorted(examples) == sorted(PROTOCOLS)
    certs = secure_peer_broker.certs
    keystore = tmp_path / "client-keystore.pem"  # the README's keystore: key, then certificate
    keystore.write_text(certs.client_key.read_text() + certs.client_cert.read_text())
    (tmp_path / "ca.pem").write_text(certs.ca.read_text())
    for protocol, text in examples.items():
        config = tmp_path / f"{protocol}.properties"
        config.write_text(text.replace("/etc/topiclake/", f"{tmp_path}/"))
        where = ("--bootstrap-server", secure_peer_broker.address(protocol), "--command-config", str(config))
        if protocol == "PLAINTEXT":  # User:ANONYMOUS, no ACLs: it sees no topic, and may create none
            assert kafka_tools("kafka-topics", *where, "--list").strip() == ""
            continue
        # The example's principal (alice, or the certificate's CN=client-app) is a super user.
        topic = f"readme-{protocol.lower().replace('_', '-')}"
        kafka_tools("kafka-topics", *where, "--create", "--topic", topic, "--partitions", "1")
        ours = subprocess.run([sys.executable, "-m", "topiclake.cli", "topics", "describe", topic, "--bootstrap",
                               secure_peer_broker.address(protocol), "--command-config", str(config)],
                              capture_output=True, text=True, timeout=60, cwd=REPO)
        assert ours.returncode == 0 and topic in ours.stdout, ours.stderr
    # The SASL examples really log in: with another password, Kafka's tool is refused.
    wrong = tmp_path / "wrong.properties"
    wrong.write_text(examples["SASL_SSL"].replace("/etc/topiclake/", f"{tmp_path}/").replace("alice-secret", "x"))
    refused = kafka_tools.run("kafka-topics", "--bootstrap-server", secure_peer_broker.address("SASL_SSL"), "--command-config",
                              str(wrong), "--list", check=False)
    assert refused.returncode != 0 and "Authentication failed" in refused.stdout + refused.stderr
