"""`topiclake groups` / `topics` against a real broker: unknown groups, offsets-only groups,
alter-config with only --delete."""

from __future__ import annotations

import re
import socket
import threading

from typer.testing import CliRunner

from topiclake.cli import app
from topiclake.lake.runs.mirror import mirror_offsets

runner = CliRunner()


def cli(broker, *args: str):
    return runner.invoke(app, [*args, "--bootstrap", broker.bootstrap])


def test_unknown_group_does_not_exist_but_an_offsets_only_group_does(broker):
    broker.create_topic("orders", 2)
    # The ingest job's mirror: offsets committed outside any generation, no members ever.
    mirrored = mirror_offsets(broker.bootstrap, "ingest-orders", {("orders", 0): 0, ("orders", 1): 0})
    assert mirrored.ok, mirrored.describe()

    for command in ("describe", "lag"):
        result = cli(broker, "groups", command, "no-such-group")
        assert result.exit_code == 1, result.output
        assert result.stdout == "" and result.stderr == "error: group 'no-such-group' does not exist\n"

    described = cli(broker, "groups", "describe", "ingest-orders")
    assert described.exit_code == 0, described.output
    assert described.stdout.startswith("Group: ingest-orders\tState: Empty\t") and "Members: 0" in described.stdout
    lag = cli(broker, "groups", "lag", "ingest-orders")
    assert lag.exit_code == 0, lag.output
    rows = [line.split() for line in lag.stdout.splitlines()[1:]]
    assert rows == [["orders", "0", "0", "0", "0", "-"], ["orders", "1", "0", "0", "0", "-"]]

    # reset-offsets may create a group (kafka-consumer-groups does too): an unknown group is fine there
    reset = cli(broker, "groups", "reset-offsets", "new-group", "--topic", "orders", "--to-earliest")
    assert reset.exit_code == 0 and "Dry run" in reset.stdout, reset.output


def test_alter_config_with_only_delete(broker):
    assert cli(broker, "topics", "create", "events", "--config", "retention.ms=60000",
               "--config", "cleanup.policy=compact").exit_code == 0
    result = cli(broker, "topics", "alter-config", "events", "--delete", "retention.ms")
    assert result.exit_code == 0, result.output
    assert result.stdout == "Updated configs of topic events.\n"
    described = cli(broker, "topics", "describe", "events").stdout
    assert described.splitlines()[0].endswith("\tConfigs: cleanup.policy=compact")

    nothing = cli(broker, "topics", "alter-config", "events")
    assert nothing.exit_code == 2
    assert nothing.stderr == "error: give at least one key=value to set or --delete KEY to remove\n"


def test_a_connection_that_closes_mid_command_is_one_error_line():
    """Something listens on the port but hangs up on the first request (not a Kafka broker, or
    a broker going down): one line naming the address, exit 1."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = "127.0.0.1:%d" % listener.getsockname()[1]

        def hang_up():
            conn, _ = listener.accept()
            conn.recv(4)  # the request has started arriving
            conn.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        result = runner.invoke(app, ["topics", "list", "--bootstrap", address])
        thread.join(10)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    assert re.fullmatch(rf"error: lost the broker at {address}: "
                        rf"({address} closed the connection|Connection reset by peer)\n", result.stderr)
