"""Exactly once under crashes: a real producer keeps producing through a real broker while ingest
processes are SIGKILLed at random points (planning, executors writing, validation, commit,
mirror...). The final table holds every acknowledged record exactly once, and a run with nothing
new commits nothing.

Each child is one driver process (with its Spark JVM and Python workers, in its own process
group) that runs ingest after ingest until it is killed. The first child dies at a random moment
of its first (cold) run; the others once they have committed a run, at a random moment of the
next ones (as long as about one warm run), so kills land in every phase, the commit and the
mirror included. The seed is printed so that a failure can be replayed (KILL_SEED=..., KILLS=...).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time

import pyarrow.compute as pc
import pytest

from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.table.delta import app_id

from tests.support.lake import read_table
from tests.support.paths import REPO
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.slow

TOPIC, PARTITIONS = "clicks", 2
KILLS = int(os.environ.get("KILLS", 3))

CHILD = """
import sys
import time
from pathlib import Path
from topiclake.lake.runs.ingest import IngestOptions, ingest
from topiclake.lake.spark.session import get_session

spark = get_session("kill-test", master="local[1]", conf={"spark.ui.enabled": "false",
                                                         "spark.ui.showConsoleProgress": "false"})
import great_expectations  # noqa: F401  (imported before READY: start-up is not a kill point of interest)
print("READY", flush=True)
while True:
    started = time.monotonic()
    result = ingest(spark, IngestOptions(topics=(sys.argv[2],), root=Path(sys.argv[1]), bootstrap=sys.argv[3],
                                         target_task_bytes=65536))
    print("RUN", result.tables[0].version, result.records, round(time.monotonic() - started, 1), flush=True)
"""


class Producing(threading.Thread):
    """Produces until stopped; remembers every acknowledged (partition, offset, value)."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True,
                                  "log_level": 0})
        self.acked: list[tuple[int, int, bytes]] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def _delivered(self, err, msg):
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def run(self):
        n = 0
        while not self.stopping.is_set():
            for _ in range(10):  # about 100 records/s: tiny data, several tasks per run
                self.producer.produce(TOPIC, value=f"v{n}".encode(), key=f"k{n % 7}".encode(),
                                      partition=n % PARTITIONS, on_delivery=self._delivered)
                n += 1
            self.producer.poll(0)
            time.sleep(0.1)
        self.producer.flush(30)


def test_sigkill_at_random_points_while_producing(spark, tmp_path):
    seed = int(os.environ.get("KILL_SEED", random.randrange(10**6)))
    rng = random.Random(seed)
    print(f"KILL_SEED={seed}")
    broker = BrokerProcess(tmp_path / "data").start()
    root = broker.data
    try:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the futures resolve
        for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
            future.result(15)
        producing = Producing(broker.bootstrap)
        producing.start()
        script = tmp_path / "child.py"
        script.write_text(CHILD)
        runs = 0
        for kill in range(KILLS):
            child = subprocess.Popen([sys.executable, str(script), str(root), TOPIC, broker.bootstrap],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
                                     start_new_session=True)  # its own group: the JVM dies with it
            watchdog = threading.Timer(240, os.killpg, (child.pid, signal.SIGKILL))  # a hung child fails the test
            watchdog.start()
            try:
                assert child.stdout.readline().strip() == "READY", "the child did not start its Spark session"
                if kill == 0:
                    time.sleep(rng.uniform(0.0, 10.0))
                else:
                    first = child.stdout.readline().split()
                    assert first and first[0] == "RUN", f"the child died before a run: {first}"
                    time.sleep(rng.uniform(0.0, float(first[3])))
            finally:
                watchdog.cancel()
                os.killpg(child.pid, signal.SIGKILL)
                out, _ = child.communicate(timeout=30)
            runs += out.count("RUN ") + (kill > 0)
            print(f"kill {kill}: child runs before it (version, records, seconds): "
                  f"{[line.split()[1:] for line in out.splitlines() if line.startswith('RUN')]}")
        producing.stopping.set()
        producing.join(60)
        producing.producer = None  # closed while the broker is still up
        assert not producing.errors and len(producing.acked) > 0

        first = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap=broker.bootstrap))
        table, data = read_table(root / "tables" / TOPIC)
        got = sorted(zip(data["partition"].to_pylist(), data["offset"].to_pylist(), data["value"].to_pylist()))
        assert got == sorted(producing.acked), f"seed {seed}: {len(got)} rows, {len(producing.acked)} acknowledged"
        assert pc.count_distinct(data["value"]).as_py() == data.num_rows
        for p in range(PARTITIONS):
            assert table.transaction_version(app_id(f"topiclake-ingest-{TOPIC}", TOPIC, p)) == \
                1 + max(o for q, o, _ in producing.acked if q == p)
        print(f"{KILLS} kills, {runs} child runs completed before them, final run {first.records} records")

        again = ingest(spark, IngestOptions(topics=(TOPIC,), root=root, bootstrap=broker.bootstrap))
        assert again.tables[0].version is None and again.records == 0
        assert read_table(root / "tables" / TOPIC)[0].version() == table.version()
    finally:
        broker.stop()
