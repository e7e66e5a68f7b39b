"""The broker's Prometheus series (docs/METRICS.md lists each with its Kafka JMX name).

Three steps per scrape. `sample()` runs on the event loop and only copies what is in memory: the
open partitions' counters and offsets, the request counters, the group coordinator's committed
offsets, the share-partitions' in-flight state, the connection counts, the cluster's health as
this broker sees it. `resolve()` then runs on a reader thread: the log end of each partition a
group committed to that is not open here, from its files on the shared root (followed
incrementally: `segments.log_end`), and the timestamp of the record at each lagging committed
offset (one batch read per partition and offset, cached while the offset stays). `render()`
formats the text with prometheus_client on another thread. On a bucket root the scrape also
reports the object store's requests, bytes, errors and latency per operation
(`topiclake_object_store_*`: topiclake.store.metrics, counted by every ObjectStore of the process).

In cluster mode a broker has open only the partitions it leads, and loaded only the
`__consumer_offsets` partitions it coordinates, so each series comes from one broker: partition
series from the leader, group offsets and lag from the group's coordinator (for every partition
the group committed to, led here or not), the controller's gauges from the controller.

The `*_samples` functions return plain dataclasses and need nothing but the objects they read:
other views of the broker (a console) may call them directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from topiclake.segments import log_end
from topiclake.segments.batch import TimestampType, iter_batches
from topiclake.segments.errors import CorruptRecordError, LogClosedError, OffsetOutOfRangeError, TopiclakeError

from .api_keys import ApiKey
from .leadership import ClusterHealth
from .request_metrics import RequestMetrics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PartitionSample:
    topic: str
    partition: int
    messages_in: int  # records appended by Produce since the partition opened here
    bytes_in: int
    bytes_out: int  # record bytes sent by Fetch and ShareFetch
    size_bytes: int
    segments: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class GroupOffsetSample:
    group: str
    topic: str
    partition: int
    offset: int  # the committed offset
    lag: int | None  # high watermark (the log end from the files, when not open here) - offset; None: unknown


@dataclass(frozen=True, slots=True)
class SharePartitionSample:
    group: str
    topic: str
    partition: int
    in_flight: int  # records between the share-partition start and end offsets
    acquired: int  # of those, acquired by a consumer now
    acquisitions: int  # records acquired (deliveries) since this broker loaded the share-partition


@dataclass(frozen=True, slots=True)
class ApiSample:
    request: str  # Kafka's request name ("Produce")
    requests: Mapping[int, int]  # version -> requests
    buckets: list[tuple[float, int]]  # cumulative, +Inf last
    latency_sum: float


@dataclass(slots=True)
class Sample:
    """Everything one scrape reports, copied on the loop."""

    partitions: list[PartitionSample]
    groups: list[GroupOffsetSample]
    shares: list[SharePartitionSample]
    apis: list[ApiSample]
    errors: dict[tuple[str, str], int]  # (request, error name) -> count
    connections: Mapping[str, int]  # listener -> open connections
    connections_created: Mapping[str, int]
    failed_authentications: Mapping[str, int]
    successful_authentications: Mapping[str, int]
    # (topic, partition) -> the open partition, for the partitions group offsets were committed to
    open_parts: dict[tuple[str, int], Any] = field(default_factory=dict)
    health: ClusterHealth | None = None  # None: a broker alone (counted from the registry off the loop)


def partition_samples(partitions: Any) -> list[PartitionSample]:
    """The open partitions' counters and offsets (a PartitionManager; loop thread)."""
    out = []
    for part in partitions.open_partitions():
        log_ = part.log
        out.append(PartitionSample(part.topic, part.index, part.messages_in, part.bytes_in, part.bytes_out,
                                   log_.size_in_bytes, log_.segment_count, part.log_start_offset,
                                   part.log_end_offset, part.high_watermark))
    return out


def group_offset_samples(groups: Any, partitions: Any) -> list[GroupOffsetSample]:
    """Committed offsets of the groups this broker coordinates (a GroupCoordinator; loop thread),
    with their lag against the partition's high watermark where the partition is open here."""
    ends = {(p.topic, p.index): p.high_watermark for p in partitions.open_partitions()}
    out = []
    for shard in groups.runtime.active_shards():
        for group_id, group in list(shard.state.classic.groups.items()):
            for (topic, partition), value in list(group.offsets.items()):
                end = ends.get((topic, partition))
                lag = None if end is None else max(end - value.offset, 0)
                out.append(GroupOffsetSample(group_id, topic, partition, value.offset, lag))
    return out


def share_partition_samples(share: Any) -> list[SharePartitionSample]:
    """The share-partitions this broker serves (a ShareService; loop thread)."""
    out = []
    for live in share.fetcher.live_shares():
        state = live.state
        out.append(SharePartitionSample(live.key.group, live.topic, live.index, max(state.window, 0),
                                        state.acquired_count(), state.acquisitions))
    return out


def request_name(api_key: int) -> str:
    """Kafka's name of an API as its request metrics label it: PRODUCE -> Produce."""
    try:
        return "".join(word.capitalize() for word in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


def error_name(code: int) -> str:
    """Kafka's Errors name: 3 -> UNKNOWN_TOPIC_OR_PARTITION."""
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def api_samples(requests: RequestMetrics) -> tuple[list[ApiSample], dict[tuple[str, str], int]]:
    apis = [ApiSample(request_name(key), dict(stats.requests), stats.cumulative_buckets(), stats.latency_sum)
            for key, stats in sorted(list(requests.apis.items()))]
    errors = {(request_name(key), error_name(code)): count
              for key, stats in requests.apis.items() for code, count in list(stats.errors.items())}
    return apis, errors


class MetricsCollector:
    """What /metrics reports about one broker. `connections`: open connections per listener
    name now; `connections_created`: accepted since start, per listener name (the server's)."""

    def __init__(self, context: Any, connections: Callable[[], Mapping[str, int]],
                 connections_created: Mapping[str, int], object_store: Any = None):
        """`object_store`: the process's ObjectStoreMetrics (topiclake.store.metrics) on a bucket
        root, reported with every scrape; None on a file root (no such series)."""
        self.context = context
        self.connections = connections
        self.connections_created = connections_created
        # Made once: each scrape's registry adds the same collector, which copies the counts then.
        self._extra_collectors = () if object_store is None else (object_store.collector(),)
        self._timestamps: dict[tuple[str, int, int], int | None] = {}  # the last scrape's lookups
        self._log_ends = log_end.LogEnds()  # partitions committed to but not open here, followed

    def sample(self) -> Sample:
        """Loop thread: copy the state (no disk, no waiting)."""
        ctx = self.context
        apis, errors = api_samples(ctx.requests)
        groups = group_offset_samples(ctx.groups, ctx.partitions)
        open_parts = {(p.topic, p.index): p for p in ctx.partitions.open_partitions()}
        leadership = ctx.leadership
        health = leadership.health() if leadership.clustered else None
        return Sample(partition_samples(ctx.partitions), [g for g in groups if self._exists(g)],
                      share_partition_samples(ctx.share), apis, errors, dict(self.connections()),
                      dict(self.connections_created), dict(ctx.security.failed_authentications()),
                      dict(ctx.security.sasl.successes),
                      {(g.topic, g.partition): open_parts[(g.topic, g.partition)] for g in groups
                       if (g.topic, g.partition) in open_parts}, health)

    def _exists(self, g: GroupOffsetSample) -> bool:
        """Whether the partition of a group offset exists (a deleted topic's offsets have no lag)."""
        if g.lag is not None:
            return True
        leadership = self.context.leadership
        if leadership.clustered:
            return leadership.leader(g.topic, g.partition) is not None
        try:
            return g.partition < self.context.partitions.topic(g.topic).partitions
        except TopiclakeError:
            return False

    def resolve(self, sample: Sample) -> dict[tuple[str, int, int], int | None]:
        """Reader thread: the lag of group offsets whose partition is not open here (its log end
        from the files), the health of a broker alone, and the timestamp of the record at each
        lagging offset (from the last scrape where the offset has not moved since)."""
        layout = self.context.partitions.layout
        if sample.health is None:
            metas = self.context.partitions.registry.list()
            sample.health = ClusterHealth.alone(len(metas), sum(m.partitions for m in metas))
        resolved, followed = [], set()
        for g in sample.groups:
            if g.lag is None:
                directory = layout.log_dir(g.topic, g.partition)
                followed.add(directory)
                end = self._log_ends.end_offset(directory)
                g = g if end is None else dataclasses.replace(g, lag=max(end - g.offset, 0))
            resolved.append(g)
        sample.groups = resolved
        self._log_ends.forget(followed)
        found = {}
        for g in resolved:
            key = (g.topic, g.partition, g.offset)
            if not g.lag or key in found:
                continue
            if key in self._timestamps:
                found[key] = self._timestamps[key]
            elif (part := sample.open_parts.get((g.topic, g.partition))) is not None:
                found[key] = timestamp_at(part, g.offset)
            else:
                found[key] = log_end.timestamp_at(layout.log_dir(g.topic, g.partition), g.offset)
        self._timestamps = found
        return found

    async def scrape(self) -> bytes:
        """The /metrics text: sampled on the loop, lag resolved and text formatted off it."""
        sample = self.sample()
        timestamps = await self.context.partitions.run_read(self.resolve, sample)
        return await asyncio.to_thread(render, sample, timestamps, time.time(), self._extra_collectors)


def timestamp_at(part: Any, offset: int) -> int | None:
    """Reader thread: the timestamp of the record at `offset`, or of the next one the log still holds
    (compaction or retention removed it); None if there is none."""
    offset = max(offset, part.log_start_offset)
    try:
        data = part.log.read(offset, 1, min_one_message=True).to_bytes()
        for batch in iter_batches(data, source=f"{part.topic}-{part.index}", allow_partial_tail=True, validate=False):
            header = batch.header
            if header.last_offset < offset:
                continue
            if header.timestamp_type is TimestampType.LOG_APPEND_TIME:
                return header.max_timestamp
            for record in batch.records():
                if record.offset >= offset:
                    return record.timestamp
    except (OffsetOutOfRangeError, LogClosedError, CorruptRecordError, OSError) as exc:
        # Retention or a handover moved the log meanwhile, or the bytes are bad: this series is
        # left out of this scrape, the others are reported.
        log.debug("no timestamp at %s-%d offset %d: %s", part.topic, part.index, offset, exc)
    return None


def render(sample: Sample, timestamps: Mapping[tuple[str, int, int], int | None], now_s: float,
           extra_collectors: Iterable[Any] = ()) -> bytes:
    """The Prometheus text exposition of `sample` and of `extra_collectors` (any thread)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(sample, timestamps, now_s))
    for collector in extra_collectors:
        registry.register(collector)
    return generate_latest(registry)


class _Families:
    """A prometheus_client collector over one Sample."""

    def __init__(self, sample: Sample, timestamps: Mapping[tuple[str, int, int], int | None], now_s: float):
        self.sample, self.timestamps, self.now_s = sample, timestamps, now_s

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        s = self.sample

        def family(kind, name: str, doc: str, labels: list[str], rows: Iterable[tuple[tuple, float]]):
            metric = kind(name, doc, labels=labels)
            for values, value in rows:
                metric.add_metric([str(v) for v in values], value)
            return metric

        topics: dict[str, list[int]] = {}
        for p in s.partitions:
            totals = topics.setdefault(p.topic, [0, 0, 0])
            totals[0] += p.messages_in
            totals[1] += p.bytes_in
            totals[2] += p.bytes_out
        # Kafka's BrokerTopicMetrics, per topic (summed over the partitions open here).
        for i, (name, doc) in enumerate((
                ("kafka_server_brokertopicmetrics_messagesin", "Records appended by Produce requests"),
                ("kafka_server_brokertopicmetrics_bytesin", "Record batch bytes appended by Produce requests"),
                ("kafka_server_brokertopicmetrics_bytesout", "Record bytes sent by Fetch and ShareFetch"))):
            yield family(CounterMetricFamily, name, doc, ["topic"],
                         (((topic,), totals[i]) for topic, totals in sorted(topics.items())))
        by_partition = [((p.topic, p.partition), p) for p in s.partitions]
        for name, doc, attr in (
                ("topiclake_partition_messagesin", "Records appended by Produce requests", "messages_in"),
                ("topiclake_partition_bytesin", "Record batch bytes appended by Produce requests", "bytes_in"),
                ("topiclake_partition_bytesout", "Record bytes sent by Fetch and ShareFetch", "bytes_out")):
            yield family(CounterMetricFamily, name, doc, ["topic", "partition"],
                         ((key, getattr(p, attr)) for key, p in by_partition))
        for name, doc, attr in (
                ("kafka_log_log_size", "Bytes of the partition's segment files", "size_bytes"),
                ("kafka_log_log_numlogsegments", "Segments of the partition", "segments"),
                ("kafka_log_log_logstartoffset", "The partition's log start offset", "log_start_offset"),
                ("kafka_log_log_logendoffset", "The partition's log end offset", "log_end_offset"),
                ("topiclake_partition_highwatermark", "The partition's high watermark (what consumers may read)",
                 "high_watermark")):
            yield family(GaugeMetricFamily, name, doc, ["topic", "partition"],
                         ((key, getattr(p, attr)) for key, p in by_partition))

        yield family(CounterMetricFamily, "kafka_network_requestmetrics_requests",
                     "Requests answered, by API and version", ["request", "version"],
                     (((a.request, version), count) for a in s.apis for version, count in sorted(a.requests.items())))
        yield family(CounterMetricFamily, "kafka_network_requestmetrics_errors",
                     "Error codes in responses (one per partition where a response has them), by API",
                     ["request", "error"], sorted(s.errors.items()))
        latency = HistogramMetricFamily("topiclake_network_request_duration_seconds",
                                        "Time from reading a request to sending its response, by API",
                                        labels=["request"])
        for a in s.apis:
            latency.add_metric([a.request], [(_bound(b), count) for b, count in a.buckets], a.latency_sum)
        yield latency

        yield family(GaugeMetricFamily, "kafka_server_socketservermetrics_connection_count", "Open connections",
                     ["listener"], (((k,), v) for k, v in sorted(s.connections.items())))
        yield family(CounterMetricFamily, "kafka_server_socketservermetrics_connection_creation",
                     "Connections accepted", ["listener"],
                     (((k,), v) for k, v in sorted(s.connections_created.items())))
        yield family(CounterMetricFamily, "kafka_server_socketservermetrics_failed_authentication",
                     "Failed TLS handshakes and SASL authentications", ["listener"],
                     (((k,), v) for k, v in sorted(s.failed_authentications.items())))
        yield family(CounterMetricFamily, "kafka_server_socketservermetrics_successful_authentication",
                     "Successful SASL authentications", ["listener"],
                     (((k,), v) for k, v in sorted(s.successful_authentications.items())))

        group_labels = ["group", "topic", "partition"]
        yield family(GaugeMetricFamily, "kafka_consumergroup_group_offset", "The group's committed offset",
                     group_labels, (((g.group, g.topic, g.partition), g.offset) for g in s.groups))
        yield family(GaugeMetricFamily, "kafka_consumergroup_group_lag",
                     "High watermark minus the committed offset", group_labels,
                     (((g.group, g.topic, g.partition), g.lag) for g in s.groups if g.lag is not None))
        yield family(GaugeMetricFamily, "kafka_consumergroup_group_lag_seconds",
                     "Age of the record at the committed offset (0 when the group is caught up)", group_labels,
                     (((g.group, g.topic, g.partition), seconds) for g in s.groups
                      if (seconds := self._lag_seconds(g)) is not None))

        share_labels = ["group", "topic", "partition"]
        yield family(GaugeMetricFamily, "kafka_server_sharepartitionmetrics_inflightmessagecount",
                     "Records in the share-partition's in-flight window", share_labels,
                     (((x.group, x.topic, x.partition), x.in_flight) for x in s.shares))
        yield family(GaugeMetricFamily, "topiclake_sharepartition_acquired_records",
                     "In-flight records acquired by a consumer now", share_labels,
                     (((x.group, x.topic, x.partition), x.acquired) for x in s.shares))
        yield family(CounterMetricFamily, "topiclake_sharepartition_acquisitions",
                     "Records acquired (deliveries) since the share-partition loaded on this broker", share_labels,
                     (((x.group, x.topic, x.partition), x.acquisitions) for x in s.shares))

        if s.health is not None:
            yield from _health_families(s.health, family)

    def _lag_seconds(self, g: GroupOffsetSample) -> float | None:
        if g.lag is None:
            return None
        if g.lag == 0:
            return 0.0
        timestamp = self.timestamps.get((g.topic, g.partition, g.offset))
        if timestamp is None or timestamp < 0:
            return None
        return max(self.now_s - timestamp / 1000, 0.0)


SESSION_STATES = ("connected", "suspended", "lost")


def _health_families(h: ClusterHealth, family) -> Iterable[Any]:
    """Cluster health: Kafka's controller and replica-manager gauges, the ZooKeeper session."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for name, doc, value in (
            ("kafka_controller_kafkacontroller_activecontrollercount", "1 on the broker holding the controller role",
             int(h.active_controller)),
            ("kafka_controller_kafkacontroller_offlinepartitionscount",
             "Partitions without a live leader (on the controller; 0 elsewhere)", h.offline),
            ("kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
             "Partitions led by another broker than their preferred one (on the controller)", h.preferred_imbalance),
            ("kafka_controller_kafkacontroller_globaltopiccount", "Topics (on the controller)", h.topics),
            ("kafka_controller_kafkacontroller_globalpartitioncount", "Partitions (on the controller)", h.partitions),
            ("kafka_controller_kafkacontroller_activebrokercount", "Live brokers (on the controller)", h.live_brokers),
            ("kafka_server_replicamanager_leadercount", "Partitions this broker leads", h.leaders),
            ("kafka_server_replicamanager_partitioncount", "Partitions naming this broker among their replicas",
             h.replicas),
            ("kafka_server_replicamanager_underreplicatedpartitions",
             "Partitions this broker leads with a replica that is not live", h.under_replicated)):
        yield family(GaugeMetricFamily, name, doc, [], [((), value)])
    yield family(GaugeMetricFamily, "kafka_server_sessionexpirelistener_sessionstate",
                 "This broker's ZooKeeper session: 1 for its state (a broker alone: connected)", ["state"],
                 (((state,), int(state == h.session)) for state in SESSION_STATES))
    for name, doc, value in (
            ("kafka_server_sessionexpirelistener_zookeeperdisconnects", "ZooKeeper connection losses",
             h.zookeeper_disconnects),
            ("kafka_server_sessionexpirelistener_zookeeperexpires", "ZooKeeper sessions expired", h.zookeeper_expires),
            ("kafka_controller_controllerstats_leaderelections", "Leader changes this broker wrote", h.elections)):
        yield family(CounterMetricFamily, name, doc, [], [((), value)])


def _bound(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
