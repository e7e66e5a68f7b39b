"""The tests' broker processes (tests/support/broker_process.py) on a port another process took
between its pick and the broker's bind: a connection to the port proves nothing then, the broker
is ready only once it holds the listening socket itself, and a port it picked is picked again."""

from __future__ import annotations

import socket

import pytest

from tests.support.broker_process import BrokerProcess, listens_on


def test_a_picked_port_taken_first_is_picked_again_and_the_other_listener_never_counts(tmp_path):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    broker = BrokerProcess(tmp_path / "data")
    broker.port = taken  # as if another process took the picked port before the broker bound it
    try:
        broker.start()
        assert broker.port != taken
        assert listens_on(broker.proc.pid, broker.port) and not listens_on(broker.proc.pid, taken)
        assert f"cannot listen on 127.0.0.1:{taken}" in broker.log()
    finally:
        broker.kill()
        squatter.close()


def test_a_given_port_taken_fails_the_start(tmp_path):
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    broker = BrokerProcess(tmp_path / "data", squatter.getsockname()[1])
    try:
        with pytest.raises(RuntimeError, match="cannot listen on"):
            broker.start()
    finally:
        broker.kill()
        squatter.close()
