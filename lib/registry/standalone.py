"""`topiclake registry start`: the registry beside a broker, reaching `_schemas` over the Kafka
protocol (kafka_store.py). SIGTERM/SIGINT stop it cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal

from .config import SCHEMAS_TOPIC, parse_listen
from .http import serve
from .kafka_store import KafkaSchemaStore
from .service import SchemaRegistry

log = logging.getLogger(__name__)


async def run(bootstrap: str, listen: str, *, topic: str = SCHEMAS_TOPIC, read_only: bool = False,
              on_ready=None) -> None:
    host, port = parse_listen(listen)
    store = KafkaSchemaStore(bootstrap, topic)
    await store.open()
    try:
        registry = SchemaRegistry(store, read_only=read_only)
        await registry.load()
        runner, bound = await serve(registry, host, port)
        url = f"http://{host}:{bound}"
        log.info("schema registry listening on %s (%s on %s%s)", url, topic, bootstrap,
                 ", read-only" if read_only else "")
        if on_ready is not None:
            on_ready(url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await runner.cleanup()
    finally:
        await store.close()
    log.info("schema registry stopped")
