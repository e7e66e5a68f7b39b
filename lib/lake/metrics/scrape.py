"""What `topiclake metrics` prints and serves: the lake as one Prometheus collector.

Each collect() reads the storage root afresh: the runs' textfiles (run_metrics) and every table's
snapshot and freshness (freshness); on an object-store root also this process's object-store
requests, bytes, errors and latency per operation (topiclake.store.metrics). No Spark and no
broker: deltalake and lib/segments only, so a scrape costs a few file (or object) reads per
table. It runs beside the broker as a second scrape target: the broker may not load the lake
(docs/DESIGN.md: broker and lake are independent).
"""

from __future__ import annotations

import time
from pathlib import Path

from . import freshness, run_metrics

TABLE_LABELS = ("table",)
PARTITION_LABELS = ("table", "group", "topic", "partition")


class LakeCollector:
    """A prometheus_client collector over a storage root."""

    def __init__(self, root):
        """`root`: a directory, or an object-store root (topiclake.store's S3Root): there also the
        object store's request series."""
        self.root = root if not isinstance(root, (str, Path)) else Path(root)

    def collect(self):
        started = time.monotonic()
        yield from run_metrics.last_run_families(self.root)
        yield from table_families(freshness.table_states(self.root))
        if not isinstance(self.root, Path):  # this process's requests to the bucket (topiclake.store.metrics)
            from topiclake.store.metrics import process_metrics

            yield from process_metrics().families()
        from prometheus_client.core import GaugeMetricFamily

        yield GaugeMetricFamily("topiclake_lake_scrape_duration_seconds",
                                "Time this scrape took to read the textfiles and the tables.",
                                value=time.monotonic() - started)


def table_families(states: list[freshness.TableState]) -> list:
    from prometheus_client.core import GaugeMetricFamily

    def family(name: str, doc: str, labels=TABLE_LABELS) -> GaugeMetricFamily:
        return GaugeMetricFamily("topiclake_table_" + name, doc, labels=labels)

    up = family("up", "1 if the table and its log could be read, 0 if not (the error is logged).")
    version = family("version", "The table's current Delta version.")
    files = family("files", "Data files in the table's current snapshot.")
    size = family("bytes", "Bytes of the data files in the table's current snapshot.")
    rows = family("rows", "Rows in the table's current snapshot (from the add actions' stats).")
    committed = family("committed_offset", "The ingest group's next offset, committed in the table.",
                       PARTITION_LABELS)
    log_end = family("log_end_offset", "The partition's log end offset (high watermark).", PARTITION_LABELS)
    lag = family("lag_records", "Records in the log not yet in the table: log end - committed offset.",
                 PARTITION_LABELS)
    fresh = family("freshness_seconds", "Timestamp of the last record in the log minus that of the newest "
                   "record committed to the table.", PARTITION_LABELS)
    corrupt = GaugeMetricFamily("topiclake_log_corrupt", "1 if the partition's log is damaged where its ingest "
                                "reads (no reader gets past it: topiclake repair-log), else 0.",
                                labels=["topic", "partition"])
    corrupt_offset = GaugeMetricFamily("topiclake_log_corrupt_offset", "The offset where the partition's log is "
                                       "damaged (only while it is).", labels=["topic", "partition"])
    judged: set[tuple[str, int]] = set()  # a partition that feeds two tables is one series
    for s in states:
        for p in s.partitions:
            if (p.topic, p.partition) in judged:
                continue
            judged.add((p.topic, p.partition))
            corrupt.add_metric([p.topic, str(p.partition)], 0 if p.corrupt_offset is None else 1)
            if p.corrupt_offset is not None:
                corrupt_offset.add_metric([p.topic, str(p.partition)], p.corrupt_offset)
    for s in states:
        up.add_metric([s.name], 0 if s.error else 1)
        if s.error:
            continue
        version.add_metric([s.name], s.version)
        files.add_metric([s.name], s.files)
        size.add_metric([s.name], s.bytes)
        rows.add_metric([s.name], s.rows)
        for p in s.partitions:
            labels = [s.name, s.group, p.topic, str(p.partition)]
            if p.committed is not None:
                committed.add_metric(labels, p.committed)
            log_end.add_metric(labels, p.log_end)
            lag.add_metric(labels, p.lag_records)
            if p.freshness_s is not None:
                fresh.add_metric(labels, p.freshness_s)
    return [up, version, files, size, rows, committed, log_end, lag, fresh, corrupt, corrupt_offset]


def exposition(root: Path) -> bytes:
    """The whole lake in Prometheus' text format (version 0.0.4)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakeCollector(root))
    return generate_latest(registry)


def serve(root: Path, host: str, port: int):
    """Serve /metrics on host:port from a background thread; returns (server, thread)."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(LakeCollector(root))
    return start_http_server(port, addr=host, registry=registry)
