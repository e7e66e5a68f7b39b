"""How long a broker holding many partitions takes to stop cleanly and to start again, cleanly
and after a kill -9, against Apache Kafka doing the same in the same run.

Each broker gets one topic of --partitions partitions (default 2,000) and --records records of
100 bytes in every partition (one confluent-kafka producer, acks=all), then:
- clean stop: SIGTERM to process exit (Kubernetes gives 30 s before its kill -9);
- clean start: process start to the port answering Metadata for the topic ("start"), and to a
  produce acknowledged by every partition ("all": topiclake opens every log in the background
  once it serves, Kafka opens every log before it serves, so "all" is the figure that compares);
- the same records again, a kill -9, then the unclean start: to Metadata and to every partition
  acknowledging a produce (every log recovered from its recovery point);
- a last check: the sum of the partitions' end offsets is every record acknowledged (nothing
  acknowledged was lost by the kill), then a last clean stop, now with every partition open
  and recovered.
The baseline is one Apache Kafka 4.4.0 KRaft node (bench/_kafka.py; the jars bin/fetch-peers
fetches). Without them (or with --baseline small) the baseline is topiclake itself with 100
partitions, and the JSON says so. The last line is one JSON object: every figure, and the
ratios topiclake / baseline ("*_ratio"; targets: clean stop <= 5 s, unclean start "all" <= 5 s).

    python bench/stop_start.py [--partitions 2000] [--records 5] [--baseline kafka|small]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import REPO, _free_port

TOPIC = "stop-start"
VALUE = b"v" * 100
SMALL_PARTITIONS = 100


class TopiclakeProcess:
    """`topiclake broker start` on a fixed port and data directory, started again and again."""

    name = "topiclake"

    def __init__(self, work: Path):
        self.work, self.port, self.proc = work, _free_port(), None
        self.data = work / "data"
        work.mkdir(parents=True)

    def start(self) -> None:
        log = open(self.work / "broker.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "topiclake.cli", "broker", "start", "--port",
                                      str(self.port), "--data", str(self.data), "--log-level", "INFO"],
                                     stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        log.close()

    def log_tail(self) -> str:
        return (self.work / "broker.log").read_text()[-3000:]


class KafkaProcess:
    """One Apache Kafka KRaft node (formatted once), started again and again on the same log dir."""

    name = "kafka"

    def __init__(self, work: Path):
        from _kafka import _cluster_id, fetch_peers, server_properties

        self.work, self.port, self.proc = work, _free_port(), None
        work.mkdir(parents=True)
        self.home = Path(fetch_peers("kafka")["KAFKA_HOME"])
        self.config = work / "server.properties"
        # Kafka's defaults, num.recovery.threads.per.data.dir=1 included (as shipped)
        self.config.write_text(server_properties(work / "kafka-logs", self.port, _free_port()))
        done = subprocess.run([str(self.home / "bin" / "kafka-storage.sh"), "format", "--standalone",
                               "--cluster-id", _cluster_id(), "--config", str(self.config)], capture_output=True,
                              text=True)
        if done.returncode:
            raise RuntimeError(f"kafka-storage format failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        log = open(self.work / "kafka.log", "ab")
        self.proc = subprocess.Popen([str(self.home / "bin" / "kafka-server-start.sh"), str(self.config)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def log_tail(self) -> str:
        return (self.work / "kafka.log").read_text()[-3000:]


def _bootstrap(broker) -> str:
    return f"127.0.0.1:{broker.port}"


def wait_for_metadata(broker, partitions: int | None, timeout: float = 300.0) -> None:
    """Until the port accepts, then until Metadata answers (with the topic's partitions, if given)."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    admin = None
    while time.monotonic() < deadline:
        if broker.proc.poll() is not None:
            raise RuntimeError(f"{broker.name} exited with {broker.proc.returncode}: {broker.log_tail()}")
        try:
            if admin is None:
                socket.create_connection(("127.0.0.1", broker.port), timeout=0.5).close()
                admin = AdminClient({"bootstrap.servers": _bootstrap(broker), "log_level": 0})
            metadata = admin.list_topics(TOPIC if partitions else None, timeout=2)
            topic = metadata.topics.get(TOPIC)
            if metadata.brokers and (partitions is None or (topic is not None and topic.error is None
                                                            and len(topic.partitions) == partitions)):
                return
        except Exception:  # noqa: BLE001, S110 - not serving yet: try again
            pass
        time.sleep(0.02)
    raise RuntimeError(f"{broker.name} did not answer Metadata within {timeout}s: {broker.log_tail()}")


def produce_everywhere(broker, partitions: int, records: int) -> int:
    """`records` records to every partition, all acknowledged (acks=all); returns how many."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": _bootstrap(broker), "acks": "all", "linger.ms": 5, "log_level": 0,
                         "queue.buffering.max.messages": 1_000_000, "message.timeout.ms": 300_000})
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    for _ in range(records):
        for partition in range(partitions):
            producer.produce(TOPIC, VALUE, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    if producer.flush(300) or errors:
        raise RuntimeError(f"produce to {broker.name} failed: {errors[:3]}")
    return records * partitions


def end_offsets(broker, partitions: int) -> int:
    """The sum of every partition's end offset (ListOffsets latest)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": _bootstrap(broker)})
    wanted = {TopicPartition(TOPIC, p): OffsetSpec.latest() for p in range(partitions)}
    futures = admin.list_offsets(wanted, request_timeout=120)
    return sum(future.result().offset for future in futures.values())


def timed_start(broker, partitions: int, records: int) -> tuple[float, float]:
    """(seconds to Metadata, seconds to every partition acknowledging `records` more records)."""
    began = time.perf_counter()
    broker.start()
    wait_for_metadata(broker, partitions)
    to_metadata = time.perf_counter() - began
    produce_everywhere(broker, partitions, records)
    return to_metadata, time.perf_counter() - began


def timed_stop(broker, sig: int = signal.SIGTERM) -> float:
    began = time.perf_counter()
    broker.proc.send_signal(sig)
    code = broker.proc.wait(600)
    elapsed = time.perf_counter() - began
    if sig == signal.SIGTERM and code not in (0, 143):
        raise RuntimeError(f"{broker.name} exited with {code} after SIGTERM: {broker.log_tail()}")
    return elapsed


def measure(broker, partitions: int, records: int) -> dict:
    from partitions import create_wide_topic  # in steps: Kafka's controller refuses 10,000 at once

    broker.start()
    wait_for_metadata(broker, None)
    create_wide_topic(_bootstrap(broker), TOPIC, partitions)
    wait_for_metadata(broker, partitions)
    acknowledged = produce_everywhere(broker, partitions, records)
    out = {"clean_stop_s": timed_stop(broker)}
    out["clean_start_s"], out["clean_start_all_s"] = timed_start(broker, partitions, records)
    acknowledged += records * partitions
    acknowledged += produce_everywhere(broker, partitions, records)
    timed_stop(broker, signal.SIGKILL)
    out["unclean_start_s"], out["unclean_start_all_s"] = timed_start(broker, partitions, records)
    acknowledged += records * partitions
    found = end_offsets(broker, partitions)
    if found != acknowledged:
        raise RuntimeError(f"{broker.name}: {acknowledged} records acknowledged, {found} in the log after kill -9")
    out["stop_all_open_s"] = timed_stop(broker)
    return {key: round(value, 3) for key, value in out.items()}


def kafka_available() -> bool:
    try:
        from _kafka import fetch_peers
        return Path(fetch_peers("kafka")["KAFKA_HOME"], "bin", "kafka-server-start.sh").exists()
    except (RuntimeError, KeyError, OSError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--records", type=int, default=5, help="records per partition per round")
    parser.add_argument("--baseline", choices=("kafka", "small"), default="kafka")
    args = parser.parse_args()
    baseline = args.baseline if args.baseline == "small" or kafka_available() else "small"
    results: dict = {"partitions": args.partitions, "records_per_partition": args.records,
                     "load_before": round(os.getloadavg()[0], 1)}
    with tempfile.TemporaryDirectory(prefix="topiclake-bench-stop-") as tmp:
        ours = measure(TopiclakeProcess(Path(tmp) / "topiclake"), args.partitions, args.records)
        print(f"topiclake ({args.partitions} partitions): {ours}", flush=True)
        if baseline == "kafka":
            theirs = measure(KafkaProcess(Path(tmp) / "kafka"), args.partitions, args.records)
            results["baseline"] = f"Apache Kafka ({args.partitions} partitions)"
        else:
            theirs = measure(TopiclakeProcess(Path(tmp) / "small"), SMALL_PARTITIONS, args.records)
            results["baseline"] = f"topiclake with {SMALL_PARTITIONS} partitions (no Kafka jars)"
        print(f"{results['baseline']}: {theirs}", flush=True)
    results["topiclake"], results["baseline_figures"] = ours, theirs
    for key in ours:
        results[key.removesuffix("_s") + "_ratio"] = round(ours[key] / theirs[key], 2) if theirs[key] else None
    results["load_after"] = round(os.getloadavg()[0], 1)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
