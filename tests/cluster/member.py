"""A broker stand-in: registers, optionally campaigns for controller, reports as JSON lines,
and lives until killed. `python -m tests.cluster.member CONNECT CHROOT BROKER_ID SESSION_MS [--campaign]`"""

from __future__ import annotations

import json
import sys
import threading

from topiclake.broker.cluster.config import ClusterConfig
from topiclake.broker.cluster.coordination import BrokerInfo
from topiclake.broker.cluster.zookeeper import ZooKeeperCoordination


def say(**event) -> None:
    print(json.dumps(event), flush=True)


def main() -> None:
    connect, chroot, broker_id, session_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    client = ZooKeeperCoordination(ClusterConfig(zookeeper=connect, chroot=chroot, session_timeout_ms=session_ms),
                                   broker_id)
    client.start()
    client.add_session_listener(lambda state: say(session=state.value))
    client.register_broker(BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id))
    say(registered=broker_id)
    if "--campaign" in sys.argv:
        client.campaign(lambda token: say(elected=token.epoch, fence=token.fence), lambda: say(resigned=True))
    threading.Event().wait()


if __name__ == "__main__":
    main()
