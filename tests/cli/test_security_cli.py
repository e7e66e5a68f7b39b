"""`topiclake users` and `topiclake acls` offline on --data (how the first admin is made), and
their one-line errors."""

from __future__ import annotations

from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.security.acls import AclStore
from topiclake.security.credentials import CredentialStore

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, list(args))


def test_users_offline(tmp_path):
    data = str(tmp_path)
    result = run("users", "set", "admin", "--mechanism", "SCRAM-SHA-256", "--mechanism", "PLAIN", "--password",
                 "pw-admin", "--data", data)
    assert result.exit_code == 0, result.output
    assert CredentialStore(tmp_path).verify_password("admin", "pw-admin")
    assert "admin\tPLAIN (4096), SCRAM-SHA-256 (4096)" in run("users", "list", "--data", data).output
    assert run("users", "delete", "admin", "--mechanism", "PLAIN", "--data", data).exit_code == 0
    assert "admin\tSCRAM-SHA-256 (4096)" in run("users", "list", "--data", data).output
    missing = run("users", "delete", "nobody", "--data", data)
    assert missing.exit_code == 1 and "user nobody has no credentials" in missing.output


def test_users_errors_are_one_line(tmp_path):
    bad = run("users", "set", "u", "--mechanism", "SCRAM-SHA-1", "--password", "p", "--data", str(tmp_path))
    assert bad.exit_code == 2 and "unknown mechanism SCRAM-SHA-1" in bad.output
    plain = run("users", "set", "u", "--mechanism", "PLAIN", "--password", "p", "--bootstrap", "127.0.0.1:1")
    assert plain.exit_code == 2 and "PLAIN user is set offline" in plain.output
    nowhere = run("users", "list", "--data", str(tmp_path / "missing"))
    assert nowhere.exit_code == 2 and "does not exist" in nowhere.output
    (tmp_path / "a-file").write_text("")
    not_a_root = run("users", "set", "u", "--password", "p", "--data", str(tmp_path / "a-file"))
    assert not_a_root.exit_code == 2 and "is not a directory" in not_a_root.output


def test_the_first_admin_of_a_new_root(tmp_path):
    """`users set --data` and `acls add --data` on a root that does not exist yet make it, as
    `kafka-storage format --add-scram` does: how an operator bootstraps a new secure cluster."""
    root = tmp_path / "new" / "root"
    created = run("users", "set", "admin", "--password", "pw-admin", "--data", str(root))
    assert created.exit_code == 0, created.output
    assert created.output.splitlines()[0] == f"created storage root {root}"
    assert CredentialStore(root).verify_password("admin", "pw-admin")
    other = tmp_path / "acl-root"
    added = run("acls", "add", "--allow-principal", "User:admin", "--operation", "All", "--cluster", "--data",
                str(other))
    assert added.exit_code == 0 and [b.principal for b in AclStore(other).bindings()] == ["User:admin"]


def test_acls_offline_like_kafka_acls(tmp_path):
    data = str(tmp_path)
    added = run("acls", "add", "--allow-principal", "User:alice", "--consumer", "--topic", "orders", "--group", "g",
                "--data", data)
    assert added.exit_code == 0, added.output
    assert len(AclStore(tmp_path).bindings()) == 3
    assert run("acls", "add", "--deny-principal", "User:bob", "--operation", "All", "--cluster",
               "--data", data).exit_code == 0
    listed = run("acls", "list", "--topic", "orders", "--data", data).output
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`:"
            in listed) and "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    removed = run("acls", "remove", "--principal", "User:alice", "--data", data)
    assert removed.output.count("removed:") == 3
    assert [b.principal for b in AclStore(tmp_path).bindings()] == ["User:bob"]
    wrong = run("acls", "add", "--allow-principal", "User:a", "--operation", "Jump", "--topic", "t", "--data", data)
    assert wrong.exit_code == 2 and "unknown Operation 'Jump'" in wrong.output
    camel = run("acls", "add", "--allow-principal", "User:a", "--operation", "IdempotentWrite", "--cluster",
                "--data", data)
    assert camel.exit_code == 0 and "IDEMPOTENT_WRITE CLUSTER:LITERAL:kafka-cluster" in camel.output
    none = run("acls", "add", "--allow-principal", "User:a", "--operation", "Read", "--data", data)
    assert none.exit_code == 2 and "give a resource" in none.output
