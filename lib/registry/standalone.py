"""`topiclake registry start`: the registry beside a broker, reaching `_schemas` over the Kafka
protocol (kafka_store.py). SIGTERM/SIGINT stop it cleanly."""

from __future__ import annotations

import asyncio
import logging
import signal

from .config import SCHEMAS_TOPIC, parse_listen
from .http import Authenticator, serve
from .kafka_store import KafkaSchemaStore
from .service import SchemaRegistry

log = logging.getLogger(__name__)


async def run(bootstrap: str, listen: str, *, topic: str = SCHEMAS_TOPIC, read_only: bool = False,
              on_ready=None, client_config: dict | None = None, authenticate: Authenticator | None = None) -> None:
    """`client_config`: librdkafka settings for a secured listener; `authenticate`: the REST API's
    check of each request (basic_auth.basic_auth(verify) for HTTP basic auth)."""
    host, port = parse_listen(listen)
    store = KafkaSchemaStore(bootstrap, topic, client_config)
    await store.open()
    try:
        registry = SchemaRegistry(store, read_only=read_only)
        await registry.load()
        runner, bound = await serve(registry, host, port, authenticate=authenticate)
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
