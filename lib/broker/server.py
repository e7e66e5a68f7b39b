"""The asyncio listener and the broker's lifecycle.

Start: bind the listeners, own and open shared storage (cluster id created once), serve, write the registration file
<root>/cluster/brokers/<id>.json (renewed every lease interval; a file whose lease expired
belongs to a dead broker). Stop (SIGTERM/SIGINT): stop accepting, let in-flight requests finish,
wake parked fetches, flush and close every log (Log.close writes the clean-shutdown marker),
remove the registration, exit 0.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import os
import signal
import socket
import time
from collections import Counter
from typing import TYPE_CHECKING

from topiclake.segments import ownership
from topiclake.segments.atomic import atomic_write, remove_stale_root_temp_files
from topiclake.segments.errors import TopiclakeError
from topiclake.store.metrics import process_metrics

from .bucket.metadata import apply_metadata_changes
from .bucket.service import BucketService
from .config import BrokerConfig
from .connection import Connection
from .context import BrokerContext
from .errors import ListenError
from .metrics import MetricsCollector
from .metrics_server import MetricsServer, bind
from .security.config import Listener, format_listeners

if TYPE_CHECKING:
    from .schema_registry import BrokerRegistry

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 10.0
REFRESH_INTERVAL_S = 5.0  # how often open logs look for maintenance-job changes


class BucketFenced(TopiclakeError):
    """The broker stopped because another broker took its bucket root over."""


class BrokerServer:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.context: BrokerContext | None = None
        self._servers: list[asyncio.base_events.Server] = []  # one per listener
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task] = set()
        self._background: list[asyncio.Task] = []
        self.port: int | None = None  # the first listener's port
        self.ports: dict[str, int] = {}  # listener name -> port bound
        self.registry: BrokerRegistry | None = None  # the schema registry, when [registry] listen is set
        self._start_ms = 0
        self._root_lock: ownership.RootLock | None = None
        self.connections_created: Counter[str] = Counter()  # per listener name (a metric)
        self.metrics: MetricsServer | None = None  # /metrics, when [metrics] listen is set
        self._metrics_socket: socket.socket | None = None
        self.metrics_url: str | None = None  # registered, so the console finds the object-store figures
        self.bucket: BucketService | None = None  # a bucket root's lease, flushes and seals
        self._stop = asyncio.Event()  # set by SIGTERM/SIGINT, or when another broker took the bucket root

    async def start(self) -> None:
        # Bind every listener first (not yet serving): a start that cannot listen leaves the
        # storage root untouched (a new root stays unformatted: no cluster id, no lock file).
        # Then own the root before touching anything in it: a second broker must not open,
        # recover or mark a single log (docs/DESIGN.md, "Who may write what": one writer per root).
        try:
            for listener in self.config.bound_listeners:
                try:
                    server = await asyncio.start_server(
                        functools.partial(self._on_connection, listener), listener.host or None, listener.port,
                        reuse_address=True, limit=1024 * 1024, start_serving=False)
                except OSError as exc:  # in use, not an address of this host, a name that does not resolve
                    which = "" if self.config.listeners is None else f" ({listener.name})"
                    raise ListenError(f"cannot listen on {listener.host}:{listener.port}{which}: "
                                      f"{_reason(exc)}") from exc
                self._servers.append(server)
                self.ports[listener.name] = server.sockets[0].getsockname()[1]
            if self.config.metrics.listen is not None:
                host, port = self.config.metrics.address
                try:
                    self._metrics_socket = bind(host, port)
                    self.metrics_url = _http_url(host if host not in ("", "0.0.0.0", "::") else self.config.public_host,
                                                 self._metrics_socket.getsockname()[1], "/metrics")
                except OSError as exc:
                    raise ListenError(f"cannot listen on {host}:{port} ([metrics]): {_reason(exc)}") from exc
            cluster = self.config.cluster
            zookeeper = f"{cluster.zookeeper}{cluster.chroot}"
            if cluster.enabled and self.config.bucket is None:  # many brokers: leadership per partition
                ownership.claim_mode(self.config.root, "cluster", zookeeper=zookeeper)
            elif not cluster.enabled:
                self._root_lock = ownership.acquire(self.config.root, broker_id=self.config.broker_id,
                                                    host=self.config.public_host)
            try:
                if self.config.bucket is not None:  # the lease and the metadata, from the bucket
                    first_port = next(iter(self.ports.values()))
                    self.bucket = BucketService(self.config.bucket, broker_id=self.config.broker_id,
                                                host=self.config.public_host, port=first_port,
                                                clustered=cluster.enabled)
                    await asyncio.to_thread(self.bucket.prepare)
                    if cluster.enabled:  # the bucket records the root's mode and cluster id
                        await asyncio.to_thread(self.bucket.publish_root, functools.partial(
                            ownership.claim_mode, self.config.root, "cluster", zookeeper=zookeeper,
                            shown_as=str(self.config.bucket.root)))
                if not cluster.enabled:
                    ownership.claim_mode(self.config.root, "single",
                                         shown_as=None if self.config.bucket is None else str(self.config.bucket.root))
                self.context = BrokerContext.create(self.config, bucket=self.bucket)
                if self.bucket is None:  # what a crash left between a small file's write and its rename
                    layout = self.context.layout
                    await asyncio.to_thread(remove_stale_root_temp_files, layout.root, layout.root_level_dirs)
            except BaseException:
                if self._root_lock is not None:
                    self._root_lock.release()
                raise
        except BaseException:
            for server in self._servers:
                server.close()
            if self._metrics_socket is not None:
                self._metrics_socket.close()
            raise
        self.port = next(iter(self.ports.values()))
        bound = tuple(dataclasses.replace(lsn, port=self.ports[lsn.name]) for lsn in self.config.bound_listeners)
        if bound != self.config.bound_listeners:  # ephemeral ports: advertise the ones we got
            changes = {"port": self.port} if self.config.listeners is None else {"listeners": format_listeners(bound),
                                                                                  "port": self.port}
            self.context.config = self.config = dataclasses.replace(self.config, **changes)
        if self._root_lock is not None:
            self._root_lock.update_owner(port=self.config.public_port)
        clustered = self.context.leadership.clustered
        if self.bucket is not None:
            await self._take_over_bucket()
        elif not clustered:
            # Kafka recovers every log before it serves; here they open (recovered after a kill)
            # on the opener threads while the broker already answers Metadata, so the first
            # produce to each partition does not wait for its own open, one after another.
            self._background.append(asyncio.create_task(self._open_partitions()))
        if not clustered:
            await self._start_serving()
            await self._start_registry()
        self._register()
        await self.context.groups.start()
        await self.context.txn.start()
        await self.context.share.start()
        if clustered:
            # Join first, serve after: a client must never be told of no brokers or no leaders
            # (librdkafka waited seconds on such a Metadata answer before asking again).
            await self.context.leadership.start()  # partitions it leads open, coordinators follow
            await self._start_serving()
            if self.config.registry.listen is not None:
                # _schemas is reached through the cluster, once its partition has a leader: the
                # registry starts when it can, retrying, and never holds the broker back.
                self._background.append(asyncio.create_task(self._start_registry_when_ready()))
        if self._metrics_socket is not None:
            collector = MetricsCollector(self.context, self._open_connections, self.connections_created,
                                         object_store=None if self.bucket is None else process_metrics())
            self.metrics = MetricsServer(collector, self._metrics_socket)
            await self.metrics.start()
        partitions = self.context.partitions
        self._background += [asyncio.create_task(self._renew_lease()),
                            asyncio.create_task(_every(REFRESH_INTERVAL_S, partitions.refresh_all)),
                            asyncio.create_task(_every(self.config.producer_id_expiration_check_interval_ms / 1000,
                                                       partitions.remove_expired_producers))]
        log.info("broker %d listening on %s (root %s, cluster %s)", self.config.broker_id,
                 format_listeners(self.config.bound_listeners), self.config.root, self.context.cluster_id)

    async def _take_over_bucket(self) -> None:
        """Every partition of the bucket root taken over at a new epoch before anything is served."""
        partitions = self.context.partitions
        loop = asyncio.get_running_loop()
        self.bucket.serves = partitions.serves
        self.bucket.on_writer_thread = lambda fn: partitions.io.submit(fn).result()
        self.bucket.on_fenced = lambda reason: loop.call_soon_threadsafe(self._stop.set)
        self.bucket.on_metadata_changed = lambda keys: loop.call_soon_threadsafe(
            lambda: self._background.append(asyncio.create_task(apply_metadata_changes(partitions, keys))))
        self.bucket.start()
        if self.context.leadership.clustered:
            return  # ZooKeeper hands out the partitions (cluster_node), each taken over at its epoch
        count = await partitions.open_all()
        log.info("took over %d partitions of %s", count, self.config.bucket.root)

    async def _open_partitions(self) -> None:
        began = time.monotonic()
        count = await self.context.partitions.open_all(keep_going=True)
        # A log without a marker but with no segment (its topic created, the log never opened
        # before a stop) had nothing to recover: not counted, as the loader logs no recovery for it.
        recovered = sum(bool(part.log.load_result.recovered) for part in self.context.partitions.open_partitions())
        log.info("opened %d partitions in %.2f s, %d of them recovered (no clean-shutdown marker)", count,
                 time.monotonic() - began, recovered)

    def _open_connections(self) -> Counter[str]:
        """Open connections per listener name."""
        return Counter(conn.session.listener for conn in self._connections)

    async def _start_serving(self) -> None:
        for server in self._servers:
            await server.start_serving()

    async def _on_connection(self, listener: Listener, reader: asyncio.StreamReader,
                             writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections_created[listener.name] += 1
        if await self._over_connection_rate(writer):
            return
        task = asyncio.current_task()
        self._tasks.add(task)
        conn = None
        try:
            session = await self.context.security.open_session(listener, writer)  # TLS handshake, principal
            if session is None:
                return
            conn = Connection(self.context, reader, writer, session)
            self._connections.add(conn)
            await conn.serve()
        finally:
            if conn is not None:
                self._connections.discard(conn)
            self._tasks.discard(task)

    async def _over_connection_rate(self, writer: asyncio.StreamWriter) -> bool:
        """connection_creation_rate (KIP-612): a connection over its ip's quota is held unserved
        for its throttle time, then closed, as Kafka's acceptor does."""
        peer = writer.get_extra_info("peername")
        hold_ms = self.context.throttle.record_connection(peer[0]) if isinstance(peer, tuple) else 0
        if not hold_ms:
            return False
        log.info("connection from %s over its connection_creation_rate quota: closed after %d ms", peer[0], hold_ms)
        try:
            await asyncio.wait_for(self.context.shutting_down.wait(), hold_ms / 1000)
        except asyncio.TimeoutError:
            pass
        writer.close()
        return True

    async def serve_until_stopped(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stop.set)
        await self._stop.wait()
        log.info("broker %d shutting down", self.config.broker_id)
        await self.stop()
        if self.bucket is not None and self.bucket.fenced:
            raise BucketFenced(f"stopped: another broker leads {self.config.bucket.root} ({self.bucket.fenced})")

    async def stop(self) -> None:
        ctx = self.context
        for server in self._servers:
            server.close()  # stop accepting
        if self.metrics is not None:
            await self.metrics.stop()  # before the reader threads it scrapes with are shut down
        ctx.shutting_down.set()
        if self.bucket is not None:
            self.bucket.begin_stop()
        if ctx.leadership.clustered:
            # Kafka's controlled shutdown: let go of every partition and leave the cluster first, so
            # the controller moves them at once and never hands this broker new ones while it drains
            # (requests in flight finish; later ones get NOT_LEADER_OR_FOLLOWER and go elsewhere).
            await ctx.leadership.stop()
        for part in ctx.partitions.open_partitions():
            part.notify()  # parked fetches answer now with what they have
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while any(c.busy for c in self._connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self._connections):
            conn.close()
        for task in list(self._tasks) + self._background:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._background, return_exceptions=True)
        if self.registry is not None:
            await self.registry.stop()
        await ctx.groups.stop()
        await ctx.txn.stop()
        await ctx.share.stop()
        if self.bucket is not None:
            await self.bucket.stop()  # the last flush, while the logs are open
        await ctx.partitions.close()
        if self.bucket is not None:
            await asyncio.to_thread(self.bucket.close)
        self._unregister()
        if self._root_lock is not None:
            self._root_lock.release()  # last: every log is closed
        log.info("broker %d stopped cleanly", self.config.broker_id)

    async def _start_registry_when_ready(self, retry_s: float = 2.0) -> None:
        while True:
            try:
                await self._start_registry()
                self._register()  # the registration names the registry's URL now
                return
            except Exception as exc:  # noqa: BLE001  (the cluster is still settling: try again)
                log.warning("the schema registry cannot start yet (%s); retrying in %.0f s", exc, retry_s)
                if self.registry is not None:
                    await self.registry.stop()
                    self.registry = None
                await asyncio.sleep(retry_s)

    async def _start_registry(self) -> None:
        if self.config.registry.listen is None:
            return
        # With SASL on, the registry takes HTTP basic auth with the same users (issue 14).
        sasl_on = any(listener.sasl for listener in self.config.bound_listeners)
        # In a cluster `_schemas` is led by one broker: every broker's registry reaches it over
        # the Kafka protocol, on this broker's first listener (reads and writes go to its leader).
        bootstrap = f"127.0.0.1:{self.port}" if self.context.leadership.clustered else None
        from .schema_registry import BrokerRegistry  # on use (with aiohttp: ~0.15 s of every start otherwise)

        self.registry = BrokerRegistry(self.context.partitions, self.config.registry,
                                       self.context.security.credentials.verify_password if sasl_on else None,
                                       bootstrap=bootstrap)
        await self.registry.start()

    @property
    def registry_url(self) -> str | None:
        if self.registry is None:
            return None
        host = self.config.registry.address[0]
        host = self.config.public_host if host in ("", "0.0.0.0", "::") else host
        return f"http://{host}:{self.registry.port}"

    # -- registration (docs/DESIGN.md, "The storage root": <root>/cluster/brokers/<id>.json)
    def _registration(self) -> dict:
        now_ms = int(time.time() * 1000)
        return {
            "version": 0, "broker_id": self.config.broker_id, "host": self.config.public_host,
            "port": self.config.public_port, "pid": os.getpid(),
            "endpoints": [f"{lsn.name}://{':'.join(map(str, self.config.endpoint_for(lsn.name)))}"
                          for lsn in self.config.bound_listeners],
            "schema_registry": self.registry_url,
            "metrics": self.metrics_url,
            "cluster_id": self.context.cluster_id, "start_time_ms": self._start_ms,
            "lease_renewed_ms": now_ms, "lease_expires_ms": now_ms + int(3 * self.config.lease_interval_s * 1000),
        }

    def _register(self) -> None:
        self._start_ms = int(time.time() * 1000)
        path = self.context.layout.broker_file(self.config.broker_id)
        # We hold the root's lock, so any registration left here is a dead broker's.
        atomic_write(path, json.dumps(self._registration(), indent=2).encode())

    def _unregister(self) -> None:
        try:
            self.context.layout.broker_file(self.config.broker_id).unlink()
        except FileNotFoundError:
            pass

    async def _renew_lease(self) -> None:
        path = self.context.layout.broker_file(self.config.broker_id)
        while True:
            await asyncio.sleep(self.config.lease_interval_s)
            try:
                await asyncio.to_thread(atomic_write, path, json.dumps(self._registration(), indent=2).encode())
            except OSError:
                log.exception("renewing the broker registration %s failed", path)


def _http_url(host: str, port: int, path: str) -> str:
    return f"http://[{host}]:{port}{path}" if ":" in host else f"http://{host}:{port}{path}"


async def _every(interval_s: float, work) -> None:
    """Background task: `await work()` every `interval_s`, the first time one interval after start
    (as Kafka schedules its periodic log tasks, e.g. PeriodicProducerExpirationCheck)."""
    while True:
        await asyncio.sleep(interval_s)
        try:
            await work()
        except Exception:  # a failed round must not end the schedule
            log.exception("periodic broker task %s failed; retrying in %.0f s", getattr(work, "__name__", work),
                          interval_s)


def _reason(exc: OSError) -> str:
    """The system's reason alone (asyncio wraps a bind error's text in its own sentence)."""
    if isinstance(exc, socket.gaierror) or not exc.errno:
        return exc.strerror or str(exc)
    return os.strerror(exc.errno)


async def _run(config: BrokerConfig) -> None:
    server = BrokerServer(config)
    await server.start()
    await server.serve_until_stopped()


def run_broker(config: BrokerConfig) -> None:
    """Run until SIGTERM/SIGINT (the `topiclake broker start` command)."""
    asyncio.run(_run(config))
