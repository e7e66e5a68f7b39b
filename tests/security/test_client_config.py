"""Client properties (--command-config) and [client] settings."""

from __future__ import annotations

import pytest

from topiclake.security.client_config import load, read_properties
from topiclake.segments.errors import InvalidConfigError


def test_kafka_client_properties(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# a comment\nsecurity.protocol = SASL_SSL\nsasl.mechanism: SCRAM-SHA-512\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                    "  username=\"admin\" password=\"p=w d\";\nssl.truststore.type=PEM\n"
                    "ssl.truststore.location=/ca.pem\nssl.endpoint.identification.algorithm=\n")
    assert read_properties(path)["security.protocol"] == "SASL_SSL"
    security = load({}, path)
    assert (security.sasl_username, security.sasl_password, security.ssl_cafile) == ("admin", "p=w d", "/ca.pem")
    assert security.librdkafka() == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                     "sasl.username": "admin", "sasl.password": "p=w d",
                                     "ssl.ca.location": "/ca.pem", "ssl.endpoint.identification.algorithm": "none"}


def test_client_settings_and_their_errors(tmp_path):
    assert load({}).security_protocol == "PLAINTEXT"
    assert load({"client": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                            "sasl_username": "u", "sasl_password": "p"}}).uses_sasl
    with pytest.raises(InvalidConfigError, match="needs a user name"):
        load({"client": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN"}})
    with pytest.raises(InvalidConfigError, match="unknown \\[client\\] settings"):
        load({"client": {"security.protocol": "SSL"}})
    jks = tmp_path / "jks.properties"
    jks.write_text("security.protocol=SSL\nssl.truststore.location=/t.jks\n")
    with pytest.raises(InvalidConfigError, match="JKS cannot be read here"):
        load({}, jks)
