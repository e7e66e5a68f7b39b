"""TLS and SASL with real clients, and bad input at the door (issue 13).

One broker process with all four listeners (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), a CA and a
broker certificate made by the test, and user alice set offline before the start (as
`kafka-storage format --add-scram`). confluent-kafka, kafka-python and aiokafka each produce,
consume and commit over SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, over SSL and
over SASL_SSL; a wrong password fails for each. Then what must not take the broker down: a
plaintext client on the TLS port and the reverse, an unknown mechanism, requests before
authentication, an exchange cut short, and a thousand failed logins while alice keeps working.
"""

from __future__ import annotations

import asyncio
import struct
import threading
import time

import pytest

from topiclake.broker import wire
from topiclake.client.conn import AuthenticationError, BrokerConnection
from topiclake.security.client_config import ClientSecurity

from tests.support.secure_broker import SecureBroker, make_certificates, security_toml

pytestmark = pytest.mark.slow

USER, PASSWORD = "alice", "alice-secret"
SETUPS = {  # name: (listener, mechanism)
    "sasl-plain": ("SASL_PLAINTEXT", "PLAIN"),
    "sasl-scram256": ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
    "sasl-scram512": ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    "ssl": ("SSL", None),
    "sasl-ssl": ("SASL_SSL", "SCRAM-SHA-512"),
}


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security-clients")
    certs = make_certificates(tmp / "certs")
    toml = security_toml(certs)
    proc = SecureBroker(tmp, ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"), toml,
                        users={USER: PASSWORD}).start()
    proc.certs = certs
    proc.wait_for_groups()
    try:
        yield proc
    finally:
        proc.stop()


# ------------------------------------------------------------------ the three clients
def confluent_roundtrip(secure_broker, protocol, mechanism, password, topic, group) -> tuple[list[bytes], int]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    conf = {"bootstrap.servers": secure_broker.address(protocol), "security.protocol": protocol}
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": USER, "sasl.password": password})
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(secure_broker.certs.ca)
    errors = []
    producer = Producer({**conf, "message.timeout.ms": 8000, "error_cb": errors.append})
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    if producer.flush(10) or errors:
        raise RuntimeError(f"produce failed: {errors}")
    consumer = Consumer({**conf, "group.id": group, "enable.auto.commit": False, "error_cb": errors.append})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value())
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return got, committed.offset
    finally:
        consumer.close()


def kafka_python_conf(secure_broker, protocol, mechanism, password) -> dict:
    conf = {"bootstrap_servers": secure_broker.address(protocol), "security_protocol": protocol,
            "request_timeout_ms": 15000}
    if mechanism:
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=password)
    if "SSL" in protocol:
        conf.update(ssl_cafile=str(secure_broker.certs.ca), ssl_check_hostname=True)
    return conf


def kafka_python_roundtrip(secure_broker, protocol, mechanism, password, topic, group) -> tuple[list[bytes], int]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    conf = kafka_python_conf(secure_broker, protocol, mechanism, password)
    producer = KafkaProducer(**conf)
    for i in range(3):
        producer.send(topic, f"v{i}".encode()).get(timeout=20)
    producer.close()
    consumer = KafkaConsumer(**conf, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
        consumer.commit()
        return got, consumer.committed(tp)
    finally:
        consumer.close()


def aiokafka_conf(secure_broker, protocol, mechanism, password) -> dict:
    from aiokafka.helpers import create_ssl_context

    conf = {"bootstrap_servers": secure_broker.address(protocol), "security_protocol": protocol,
            "request_timeout_ms": 15000}
    if mechanism:
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=USER, sasl_plain_password=password)
    if "SSL" in protocol:
        conf["ssl_context"] = create_ssl_context(cafile=str(secure_broker.certs.ca))
    return conf


def aiokafka_roundtrip(secure_broker, protocol, mechanism, password, topic, group) -> tuple[list[bytes], int]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run():
        conf = aiokafka_conf(secure_broker, protocol, mechanism, password)
        producer = AIOKafkaProducer(**conf)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, f"v{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**conf, group_id=group, enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            got, deadline = [], time.monotonic() + 20
            while len(got) < 3 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
            await consumer.commit()
            return got, await consumer.committed(tp)
        finally:
            await consumer.stop()

    return asyncio.run(run())


CLIENTS = {"confluent": confluent_roundtrip, "kafka-python": kafka_python_roundtrip, "aiokafka": aiokafka_roundtrip}


@pytest.mark.parametrize("setup", list(SETUPS))
@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_produces_consumes_and_commits(secure_broker, client, setup):
    protocol, mechanism = SETUPS[setup]
    topic, group = f"t-{client}-{setup}", f"g-{client}-{setup}"
    got, committed = CLIENTS[client](secure_broker, protocol, mechanism, PASSWORD, topic, group)
    assert got == [b"v0", b"v1", b"v2"]
    assert committed == 3


def test_a_wrong_password_fails_for_every_client(secure_broker):
    from confluent_kafka import KafkaError, Producer

    errors = []
    producer = Producer({"bootstrap.servers": secure_broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": USER, "sasl.password": "wrong",
                         "error_cb": errors.append, "message.timeout.ms": 3000})
    producer.produce("never", b"x")
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors

    import kafka.errors
    from kafka import KafkaProducer

    with pytest.raises(kafka.errors.KafkaError):  # it retries bootstrap until bootstrap_timeout_ms
        KafkaProducer(**{**kafka_python_conf(secure_broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", "wrong"),
                         "bootstrap_timeout_ms": 3000})

    from aiokafka import AIOKafkaProducer

    async def aio():
        conf = {**aiokafka_conf(secure_broker, "SASL_SSL", "PLAIN", "wrong"), "request_timeout_ms": 3000}
        producer = AIOKafkaProducer(**conf)
        try:
            await producer.start()
        finally:
            await producer.stop()

    from aiokafka.errors import KafkaConnectionError

    with pytest.raises(KafkaConnectionError):  # "Unable to bootstrap", the SASL error logged before it
        asyncio.run(aio())
    log = secure_broker.log_path.read_text()
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"):
        assert f"failed authentication with 127.0.0.1:" in log and f"({mechanism}, user 'alice')" in log


# ------------------------------------------------------------------------- bad input
def _security(protocol: str, secure_broker, mechanism: str | None = "SCRAM-SHA-256", password: str = PASSWORD):
    return ClientSecurity(security_protocol=protocol, sasl_mechanism=mechanism if "SASL" in protocol else None,
                          sasl_username=USER if "SASL" in protocol else None,
                          sasl_password=password if "SASL" in protocol else None, ssl_cafile=str(secure_broker.certs.ca))


def _api_versions_ok(address: str, security: ClientSecurity) -> bool:
    from kio.schema.api_versions.v3 import request as av

    with BrokerConnection(address, security=security, timeout=10) as client:
        answer = client.request(av.ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        return answer.error_code.value == 0


def _wait_for_log(secure_broker, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in secure_broker.log_path.read_text():
        assert time.monotonic() < deadline, f"{text!r} not logged"
        time.sleep(0.05)


def test_plaintext_client_on_the_tls_port_and_tls_client_on_the_plaintext_port(secure_broker):
    with pytest.raises(OSError):  # the broker closes it at the TLS handshake
        _api_versions_ok(secure_broker.address("SSL"), ClientSecurity())
    _wait_for_log(secure_broker, "does not speak TLS (a plaintext client on an SSL listener?)")
    with pytest.raises(OSError):
        _api_versions_ok(secure_broker.address("PLAINTEXT"), _security("SSL", secure_broker))
    _wait_for_log(secure_broker, "a TLS handshake on the PLAINTEXT listener")
    assert _api_versions_ok(secure_broker.address("SSL"), _security("SSL", secure_broker))  # the right way still works


def test_unknown_mechanism_and_requests_before_authentication(secure_broker):
    from kio.schema.metadata.v12 import request as md
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    with BrokerConnection(secure_broker.address("SASL_PLAINTEXT"), timeout=10) as client:
        answer = client.request(SaslHandshakeRequest(mechanism="GSSAPI"))
        assert answer.error_code.name == "unsupported_sasl_mechanism"
        assert set(answer.mechanisms) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    with BrokerConnection(secure_broker.address("SASL_PLAINTEXT"), timeout=10) as client:
        with pytest.raises(ConnectionError):  # Metadata before SaslHandshake: closed, as Kafka does
            client.request(md.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False))
    _wait_for_log(secure_broker, "before SASL authentication on the SASL_PLAINTEXT listener")
    with pytest.raises(AuthenticationError, match="invalid credentials"):  # the CLI's client says why
        BrokerConnection(secure_broker.address("SASL_PLAINTEXT"), timeout=10,
                       security=_security("SASL_PLAINTEXT", secure_broker, "SCRAM-SHA-512", password="wrong"))
    assert _api_versions_ok(secure_broker.address("SASL_PLAINTEXT"), _security("SASL_PLAINTEXT", secure_broker))


def test_an_exchange_cut_short_and_a_v0_handshake(secure_broker):
    from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as V0
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    client = BrokerConnection(secure_broker.address("SASL_PLAINTEXT"), timeout=10)
    assert client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256")).error_code.value == 0
    client.close()  # before any token
    client = BrokerConnection(secure_broker.address("SASL_PLAINTEXT"), timeout=10)
    client.request(SaslHandshakeRequest(mechanism="SCRAM-SHA-256"))
    client.send_raw(struct.pack(">i", 1000) + b"n,,n=alice")  # a frame that never ends
    client.close()
    # Handshake v0: the PLAIN token travels as a bare frame and the answer comes back bare (Kafka 0.10).
    with BrokerConnection(secure_broker.address("SASL_PLAINTEXT"), timeout=10) as client:
        assert client.request(V0(mechanism="PLAIN")).error_code.value == 0
        client.send_raw(wire._SIZE.pack(len(token := f"\0{USER}\0{PASSWORD}".encode())) + token)
        assert client.read_frame() == b""
        assert _metadata_brokers(client) == [secure_broker.ports["SASL_PLAINTEXT"]]
    assert _api_versions_ok(secure_broker.address("SASL_PLAINTEXT"), _security("SASL_PLAINTEXT", secure_broker))


def _metadata_brokers(client) -> list[int]:
    from kio.schema.metadata.v12 import request as md

    response = client.request(md.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                 include_topic_authorized_operations=False))
    return [b.port for b in response.brokers]


def test_metadata_answers_the_listener_the_client_came_in_on(secure_broker):
    for protocol in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        with BrokerConnection(secure_broker.address(protocol), security=_security(protocol, secure_broker), timeout=10) as client:
            assert _metadata_brokers(client) == [secure_broker.ports[protocol]]


async def _failed_login(port: int, user: str, password: str) -> float:
    """One PLAIN login that must fail: the seconds until the broker answered."""
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        async def ask(correlation, body):
            writer.write(wire.encode_request(correlation, body))
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            return wire.decode_response(await reader.readexactly(size), body)[1]

        assert (await ask(1, SaslHandshakeRequest(mechanism="PLAIN"))).error_code.value == 0
        started = time.monotonic()
        answer = await ask(2, SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{password}".encode()))
        assert answer.error_code.name == "sasl_authentication_failed"
        elapsed = time.monotonic() - started
        assert await reader.read(1) == b""  # and the broker closed the connection
        return elapsed
    finally:
        writer.close()


def test_a_thousand_failed_logins_slow_down_only_themselves(secure_broker):
    port = secure_broker.ports["SASL_PLAINTEXT"]

    async def attack():
        limit = asyncio.Semaphore(100)

        async def one(i):
            async with limit:
                return await _failed_login(port, USER if i % 10 == 0 else f"nobody-{i}", "guess")

        return await asyncio.gather(*(one(i) for i in range(1000)))

    started = time.monotonic()
    alice_ok = []  # alice logs in and produces while the attack runs
    thread = threading.Thread(target=lambda: alice_ok.append(confluent_roundtrip(
        secure_broker, "SASL_PLAINTEXT", "SCRAM-SHA-512", PASSWORD, "during-attack", "g-during-attack")))
    thread.start()
    delays = asyncio.run(attack())
    thread.join(60)
    assert min(delays) >= 0.09  # failed_authentication_delay_ms = 100, as Kafka's default
    assert alice_ok and alice_ok[0] == ([b"v0", b"v1", b"v2"], 3)
    assert time.monotonic() - started < 60
    log = secure_broker.log_path.read_text()
    assert log.count("failed authentication with 127.0.0.1:") >= 1000
    assert _api_versions_ok(secure_broker.address("SASL_SSL"), _security("SASL_SSL", secure_broker))
