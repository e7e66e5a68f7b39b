"""The console against a broker with SASL and the ACL authorizer: every browser logs in with a
broker user, the broker checks the password, and the console describes topics, groups and tables
as that user, so a user sees only what their ACLs let them describe."""

from __future__ import annotations

from contextlib import contextmanager

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from deltalake import write_deltalake

from topiclake.security.client_config import ClientSecurity

from tests.support.secure_broker import SecureBroker, make_certificates, security_toml
from tests.support.console import ConsoleProcess, cells, screenshot
from tests.support.clients import commit_offsets

pytestmark = pytest.mark.slow

USERS = {"admin": "admin-secret", "alice": "alice-secret"}


def sasl(broker, user: str) -> dict:
    return {"bootstrap.servers": broker.address("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": USERS[user]}


@pytest.fixture(scope="module")
def sasl_world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("console-sasl")
    toml = security_toml(make_certificates(tmp / "certs"), authorizer='"acl"', super_users='["User:admin"]')
    broker = SecureBroker(tmp, ("SASL_PLAINTEXT",), toml, users=USERS).start()
    try:
        broker.wait_for_groups(ClientSecurity("SASL_PLAINTEXT", "SCRAM-SHA-256", "admin", USERS["admin"]))
        admin = AdminClient(sasl(broker, "admin"))
        for future in admin.create_topics([NewTopic("public", 1), NewTopic("secret", 1)]).values():
            future.result(15)
        producer = Producer(sasl(broker, "admin"))
        for topic in ("public", "secret"):
            for i in range(3):
                producer.produce(topic, f"{topic}-{i}".encode())
        assert producer.flush(15) == 0
        del producer
        for group, topic in (("readers-public", "public"), ("readers-secret", "secret")):
            consumer = Consumer({**sasl(broker, "admin"), "group.id": group, "enable.auto.commit": False})
            commit_offsets(consumer, [TopicPartition(topic, 0, 1)])
            consumer.close()
        allow = [(ResourceType.TOPIC, "public", AclOperation.DESCRIBE), (ResourceType.TOPIC, "public", AclOperation.READ),
                 (ResourceType.GROUP, "readers-public", AclOperation.DESCRIBE)]
        for future in admin.create_acls([AclBinding(kind, name, ResourcePatternType.LITERAL, "User:alice", "*", op,
                                                    AclPermissionType.ALLOW) for kind, name, op in allow]).values():
            future.result(15)
        for table in ("public", "secret"):  # tables named after their topics, as ingest names them
            write_deltalake(str(broker.data / "tables" / table), pa.table({"offset": [0, 1, 2]}))
            page = broker.data / "quality" / "validations" / table / "run-1" / "20240501T000000.000000Z"
            page.mkdir(parents=True)  # where great-expectations' site keeps a validation's page
            (page / "new-files.html").write_text(f"<html><body>validation of {table}</body></html>")
        (broker.data / "quality" / "index.html").write_text("<html><body>every table's validations</body></html>")
        with ConsoleProcess(broker.data, broker.address("SASL_PLAINTEXT"),
                            args=("--security-protocol", "SASL_PLAINTEXT")) as console:
            yield broker, console
    finally:
        broker.stop()


@contextmanager
def logged_in(browser, console, user: str, password: str):
    """A fresh browser context that asked for /topics and went through the login form."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        page.goto(console.url + "/topics")
        assert page.url.startswith(console.url + "/login")
        page.fill("#username", user)
        page.fill("#password", password)
        page.click("#login")
        page.wait_for_load_state()
        yield page
    finally:
        context.close()


def test_a_wrong_password_is_refused(chromium, sasl_world, artifacts):
    _broker, console = sasl_world
    with logged_in(chromium, console, "alice", "not-her-password") as page:
        assert "/login" in page.url and "refused" in page.locator("#error").inner_text()
        screenshot(page, artifacts, "login-refused")
        assert page.goto(console.url + "/groups").url.startswith(console.url + "/login")  # still no session


def test_a_limited_user_sees_only_what_their_acls_allow(chromium, sasl_world, artifacts):
    _broker, console = sasl_world
    with logged_in(chromium, console, "alice", USERS["alice"]) as page:
        assert page.url == console.url + "/topics"
        assert cells(page, "#topics tr[data-topic] td:first-child") == ["public"]
        screenshot(page, artifacts, "topics-as-alice")
        page.goto(console.url + "/groups")
        assert cells(page, "#groups tr[data-group] td:first-child") == ["readers-public"]
        assert page.locator('#groups tr[data-group="readers-public"] td.lag').inner_text() == "2"
        page.goto(console.url + "/tables")
        assert cells(page, "#tables tr[data-table] td:first-child") == ["public"]
        assert page.goto(console.url + "/tables/secret").status == 404
        assert page.goto(console.url + "/topics/secret").status == 403
        validation = "/quality/validations/{}/run-1/20240501T000000.000000Z/new-files.html"
        assert page.goto(console.url + validation.format("public")).status == 200
        assert "validation of public" in page.content()
        assert page.goto(console.url + validation.format("secret")).status == 403
        assert page.goto(console.url + "/quality/index.html").status == 403  # it lists every table
        page.goto(console.url + "/topics/public/records?partition=0&from=0&to=3")
        assert cells(page, "#records tr[data-offset] td:nth-child(4)") == ["public-0", "public-1", "public-2"]
        page.goto(console.url + "/")
        assert page.locator("#topic-count").inner_text() == "1"
        page.click("text=Log out")
        page.wait_for_load_state()
        assert "/login" in page.url


def test_the_super_user_sees_everything(chromium, sasl_world, artifacts):
    _broker, console = sasl_world
    with logged_in(chromium, console, "admin", USERS["admin"]) as page:
        names = cells(page, "#topics tr[data-topic] td:first-child")
        assert {"public", "secret"} <= set(names)
        page.goto(console.url + "/tables")
        assert cells(page, "#tables tr[data-table] td:first-child") == ["public", "secret"]
        page.goto(console.url + "/groups")
        assert {"readers-public", "readers-secret"} <= set(cells(page, "#groups tr[data-group] td:first-child"))
        screenshot(page, artifacts, "groups-as-admin")
