"""An in-process broker on a free loopback port (its own event loop thread), and a raw client to it."""

from __future__ import annotations

import asyncio
import datetime
import threading

from kio.schema.create_topics.v7 import request as create_req

from topiclake.client.conn import BrokerConnection
from topiclake.broker.config import BrokerConfig
from topiclake.broker.server import BrokerServer


class InProcessBroker:
    def __init__(self, root, **settings):
        self.config = BrokerConfig(root=root, port=0, lease_interval_s=3600, **settings)
        self.loop = asyncio.new_event_loop()
        self.server = BrokerServer(self.config)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> "InProcessBroker":
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(10)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(20)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    @property
    def context(self):
        return self.server.context

    def client(self) -> BrokerConnection:
        return BrokerConnection(self.bootstrap, timeout=10)

    def create_topic(self, name: str, partitions: int = 1, **config: str):
        topic = create_req.CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=-1, assignments=(),
            configs=tuple(create_req.CreatableTopicConfig(name=k, value=v) for k, v in config.items()))
        with self.client() as c:
            result = c.request(create_req.CreateTopicsRequest(topics=(topic,), timeout=datetime.timedelta(seconds=5),
                                                              validate_only=False))
        return result.topics[0]
