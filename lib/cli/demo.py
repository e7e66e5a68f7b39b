"""`topiclake demo`: the quick start's main job, on the embedded default.

It runs the real pieces the way a user would, each as its own `topiclake` command: a broker on
loopback over ./data, a standard Kafka client (confluent-kafka) producing keyed records with
headers, the Spark ingest into a Delta table (local mode) whose consumer-group offsets show up in
`groups lag`, SQL over that table, and dump-log of a segment the broker wrote. Run it twice: the
second ingest picks up only the new records.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import typer

from topiclake.segments import ownership

from .roots import directory_root

TOPIC = "demo.events"
PARTITIONS = 3


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    data: str = typer.Option("data", "--data", help="Storage root (created if missing)."),
    records: int = typer.Option(20_000, "--records", help="Records to produce in this run."),
) -> None:
    """Broker -> produce with a real Kafka client -> Spark ingest to Delta -> SQL -> dump-log."""
    from rich.console import Console

    console = Console()
    data = directory_root(data).resolve()
    data.mkdir(parents=True, exist_ok=True)
    owner = ownership.owner_of(data)
    if owner is not None and not owner.get("port"):
        console.print(f"[red]error:[/red] {data} is in use by {ownership.describe_owner(owner)}, which is not "
                      "serving yet; retry in a moment, or use another --data")
        raise typer.Exit(1)
    # One writer per root: a broker that already serves the root is used, never a second one started.
    metrics_port = _free_port()
    broker = None if owner is not None else _start_broker(data, console, metrics_port)
    try:
        if broker is None:
            bootstrap = f"{owner.get('host', '127.0.0.1')}:{owner['port']}"
            registry = _registered_registry(data, owner)
            console.rule("[bold]1. using the broker that already serves the storage root")
            console.print(f"{ownership.describe_owner(owner)}, storage {data}", soft_wrap=True)
        else:
            bootstrap, registry = _wait_for_registration(data, broker)
            console.rule(f"[bold]1. broker up at {bootstrap}, storage {data}")
        if registry:
            console.print(f"schema registry at {registry} (Confluent's REST API, schemas kept in the _schemas topic)")
        if not (data / "topics" / f"{TOPIC}.json").exists():
            _topiclake("topics", "create", TOPIC, "--partitions", str(PARTITIONS), "--bootstrap", bootstrap)
        console.rule(f"[bold]2. producing {records} records to {TOPIC} with confluent-kafka")
        _produce(bootstrap, records, console)
        console.rule("[bold]3. Spark ingest into a Delta table (exactly once; reruns add only new records)")
        # The broker stays up: the ingest mirrors its group's offsets into __consumer_offsets.
        # --data-docs: the showcase builds the quality report's HTML too (a scheduled run leaves it
        # to `topiclake data-docs`).
        _topiclake("ingest", "--topic", TOPIC, "--data", str(data), "--master", "local[2]",
                   "--bootstrap", bootstrap, "--data-docs")
        console.rule("[bold]4. the ingest pipeline is a consumer group: its lag, as Kafka tools see it")
        _topiclake("groups", "lag", f"topiclake-ingest-{TOPIC}", "--bootstrap", bootstrap)
        if broker is not None:
            console.rule(f"[bold]5. what Prometheus scrapes: the broker's http://127.0.0.1:{metrics_port}/metrics "
                         "and `topiclake metrics` (the tables)")
            _show_metrics(metrics_port, data, console)
    finally:
        if broker is not None:
            _stop_broker(broker, console)
    console.rule("[bold]6. SQL over the table")
    _topiclake("sql", "--data", str(data),
               # the demo's own topic name
               f"SELECT partition, count(*) AS records, min(offset) AS first, max(offset) AS last "  # noqa: S608
               f"FROM `{TOPIC}` GROUP BY partition ORDER BY partition")
    segment = data / "log" / f"{TOPIC}-0" / "00000000000000000000.log"
    console.rule(f"[bold]7. the first batches of {segment.relative_to(data.parent)} (Kafka's own format)")
    dump = subprocess.run(_command("dump-log", str(segment)), capture_output=True, text=True, check=True)
    console.print("\n".join(dump.stdout.splitlines()[:6]), markup=False, highlight=False)
    console.rule("[bold green]done")
    console.print(f"Delta table: {data / 'tables' / TOPIC}  (readable by deltalake, DuckDB, polars, Trino, "
                  f"delta-spark). Run `topiclake --help` for everything else.")


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "topiclake.cli", *args]


def _topiclake(*args: str) -> None:
    result = subprocess.run(_command(*args))
    if result.returncode != 0:
        raise typer.Exit(result.returncode)


def _start_broker(data: Path, console, metrics_port: int) -> subprocess.Popen:
    log_path = data / "demo-broker.log"
    console.print(f"starting the broker (its log: {log_path})")
    with log_path.open("ab") as out:
        return subprocess.Popen(_command("broker", "start", "--data", str(data), "--port", "0",
                                         "--registry-listen", "127.0.0.1:0",
                                         "--metrics-listen", f"127.0.0.1:{metrics_port}"),
                                stdout=out, stderr=subprocess.STDOUT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: The series the demo shows: what came in, the ingest group's lag, and the table it feeds.
_SHOWN = ("kafka_server_brokertopicmetrics_messagesin_total", "kafka_consumergroup_group_lag{",
          "topiclake_table_rows", "topiclake_table_freshness_seconds", "topiclake_pipeline_last_run_rows")


def _show_metrics(port: int, data: Path, console) -> None:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        broker_text = response.read().decode()
    lake = subprocess.run(_command("metrics", "--data", str(data)), capture_output=True, text=True, check=True)
    lines = [line for line in (broker_text + lake.stdout).splitlines()
             if line.startswith(_SHOWN) and f'"{TOPIC}"' in line]
    console.print("\n".join(lines), markup=False, highlight=False, soft_wrap=True)


def _registered_registry(data: Path, owner: dict) -> str | None:
    """The schema registry URL a running broker registered, if it serves one."""
    try:
        info = json.loads((data / "cluster" / "brokers" / f"{owner.get('broker_id', 0)}.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return info.get("schema_registry") if info.get("pid") == owner.get("pid") else None


def _wait_for_registration(data: Path, broker: subprocess.Popen, timeout_s: float = 60) -> tuple[str, str]:
    """The broker's bootstrap address and its schema registry's URL, once it registered."""
    registration = data / "cluster" / "brokers" / "0.json"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if broker.poll() is not None:
            raise RuntimeError(f"the broker exited with code {broker.returncode}: see {data / 'demo-broker.log'}")
        try:
            info = json.loads(registration.read_text())
            if info["pid"] == broker.pid:  # not a dead broker's leftover registration
                return f"{info['host']}:{info['port']}", info["schema_registry"]
        except (FileNotFoundError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the broker did not register within {timeout_s:.0f} s: see {data / 'demo-broker.log'}")


def _produce(bootstrap: str, count: int, console) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "lz4", "linger.ms": 5,
                         "enable.idempotence": True, "acks": "all"})
    failures = []

    def delivered(err, _msg):
        if err is not None:
            failures.append(err)

    start = time.time()
    for i in range(count):
        user = f"user-{i % 97}"
        value = json.dumps({"user": user, "action": ("view", "click", "buy")[i % 3], "n": i}).encode()
        producer.produce(TOPIC, key=user.encode(), value=value, headers=[("source", b"demo")],
                         on_delivery=delivered)
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    if failures or remaining:
        raise RuntimeError(f"{len(failures)} records failed, {remaining} undelivered: {failures[:3]}")
    console.print(f"{count} records acknowledged in {time.time() - start:.1f} s")


def _stop_broker(broker: subprocess.Popen, console) -> None:
    if broker.poll() is None:
        broker.send_signal(signal.SIGTERM)  # clean shutdown: flush, clean-shutdown marker
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(broker.pid, signal.SIGKILL)
            broker.wait()
    console.print(f"broker stopped (exit code {broker.returncode})")
