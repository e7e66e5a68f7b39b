"""Kafka's listener format, [security] checks, and the old host/port."""

from __future__ import annotations

import pytest

from topiclake.broker.config import BrokerConfig
from topiclake.segments.errors import InvalidConfigError


def test_listeners_and_advertised_listeners():
    config = BrokerConfig.from_settings({"broker": {"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://:9093",
                                                    "advertised_listeners": "SASL_PLAINTEXT://kafka.example:19093"}})
    assert [(x.name, x.host, x.port) for x in config.bound_listeners] == [("PLAINTEXT", "127.0.0.1", 9092),
                                                                         ("SASL_PLAINTEXT", "", 9093)]
    assert config.endpoint_for("SASL_PLAINTEXT") == ("kafka.example", 19093)
    assert config.endpoint_for("PLAINTEXT") == ("127.0.0.1", 9092)
    assert (config.public_host, config.public_port) == ("127.0.0.1", 9092)
    old = BrokerConfig.from_settings({"broker": {"port": 9000, "advertised_host": "h"}})
    assert [x.name for x in old.bound_listeners] == ["PLAINTEXT"] and old.endpoint_for("PLAINTEXT") == ("h", 9000)
    # A flag wins over the file's other way of saying where to listen.
    flagged = BrokerConfig.from_settings({"broker": {"port": 9000}}, listeners="SASL_PLAINTEXT://127.0.0.1:1")
    assert flagged.endpoint_for("SASL_PLAINTEXT") == ("127.0.0.1", 1)


@pytest.mark.parametrize("broker, security, message", [
    ({"listeners": "FOO://:1"}, {}, "not a security protocol"),
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, {}, "appears twice"),
    ({"listeners": "PLAINTEXT:1"}, {}, "is not NAME://host:port"),
    ({"listeners": "SSL://:1"}, {}, "needs \\[security\\] ssl_certfile"),
    ({"listeners": "PLAINTEXT://:1", "port": 2}, {}, "not both"),
    ({"listeners": "PLAINTEXT://:1", "advertised_listeners": "SSL://h:1"}, {}, "not a listener"),
    ({}, {"sasl_enabled_mechanisms": ["GSSAPI"]}, "supported: PLAIN"),
    ({}, {"authorizer": "ranger"}, "authorizer"),
    ({}, {"super_users": ["admin"]}, "not a principal"),
    ({}, {"ssl_client_auth": "maybe"}, "ssl_client_auth"),
    ({}, {"bogus": 1}, "unknown \\[security\\] settings"),
])
def test_bad_settings_are_one_clear_error(broker, security, message):
    with pytest.raises(InvalidConfigError, match=message):
        BrokerConfig.from_settings({"broker": broker, "security": security})
