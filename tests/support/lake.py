"""Lake test data: tiny topics written as real Kafka segment files, and Delta tables read back
through deltalake."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pyarrow.fs as pafs

from topiclake.segments.batch import Record, build_batch
from topiclake.segments.control import build_end_txn_marker
from topiclake.segments.filenames import log_file
from topiclake.segments.storage import StorageLayout, TopicRegistry

BASE_TS = 1_714_521_600_000  # 2024-05-01T00:00:00Z


class TopicWriter:
    """Appends real batches to `<root>/log/<topic>-<p>/<base>.log`, assigning offsets as a broker
    would (the Log class is not needed to make test data)."""

    def __init__(self, root: Path, topic: str, partitions: int = 1):
        self.layout = StorageLayout(root)
        self.topic = topic
        TopicRegistry(self.layout).create(topic, partitions)
        self.next_offset = [0] * partitions
        self.segment_base = [0] * partitions
        self.clock = BASE_TS

    def path(self, partition: int) -> Path:
        d = self.layout.log_dir(self.topic, partition)
        d.mkdir(parents=True, exist_ok=True)
        return log_file(d, self.segment_base[partition])

    def append_bytes(self, partition: int, data: bytes) -> None:
        with open(self.path(partition), "ab") as f:
            f.write(data)

    def produce(self, partition: int, values: list[bytes | None], *, keys=None, producer_id: int = -1,
                transactional: bool = False, headers=(), timestamp: int | None = None) -> tuple[int, int]:
        first = self.next_offset[partition]
        records = []
        for i, value in enumerate(values):
            ts = timestamp if timestamp is not None else self.clock
            self.clock += 1000
            key = keys[i] if keys is not None else f"k{first + i}".encode()
            records.append(Record(first + i, ts, key, value, tuple(headers)))
        self.append_bytes(partition, build_batch(records, producer_id=producer_id,
                                                 producer_epoch=0 if producer_id >= 0 else -1,
                                                 base_sequence=0 if producer_id >= 0 else -1,
                                                 is_transactional=transactional))
        self.next_offset[partition] += len(values)
        return first, first + len(values) - 1

    def end_txn(self, partition: int, producer_id: int, *, commit: bool) -> int:
        offset = self.next_offset[partition]
        self.append_bytes(partition, build_end_txn_marker(offset=offset, timestamp=self.clock,
                                                          producer_id=producer_id, producer_epoch=0, commit=commit))
        self.next_offset[partition] += 1
        return offset

    def roll(self, partition: int) -> None:
        self.segment_base[partition] = self.next_offset[partition]
        self.path(partition).touch()


def read_table(uri: str):
    """The table's current snapshot through deltalake itself (never our own reader). The
    SubTreeFileSystem avoids a delta-rs abort at interpreter exit (STACK-NOTES.md)."""
    from deltalake import DeltaTable

    table = DeltaTable(str(uri))
    return table, table.to_pyarrow_table(filesystem=pafs.SubTreeFileSystem(str(uri), pafs.LocalFileSystem()))


def spark_session(warehouse: Path):
    """ONE real Spark session for the whole test run (local[2] starts in ~7 s)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from topiclake.lake.spark.session import get_session, set_spark_log

    set_spark_log(verbose=False)  # as every command: pyspark logs no SQL error before raising it

    return get_session("topiclake-tests", master="local[2]", conf={
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
        # a table some test creates without a root never lands in the checkout
        "spark.sql.warehouse.dir": str(warehouse),
    })


# A child process that ingests a bucket root's topic and kills itself -9 (SIGKILL) at the moment it
# would commit, after the executors wrote (or staged and merged) every file into the bucket.
_INGEST_KILLED_AT_COMMIT = """
import os, signal, sys
from topiclake.lake.runs import ingest as ing
from topiclake.lake.table import delta
from topiclake.lake.spark.session import get_session
from topiclake.store.root import parse_root

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

delta.commit = killed
spark = get_session("ingest-killed-at-commit", master="local[1]", conf={"spark.ui.enabled": "false"})
ing.ingest(spark, ing.IngestOptions(topics=(sys.argv[2],), root=parse_root(sys.argv[1])))
"""


def ingest_killed_at_commit(root, topic: str, env: dict[str, str]):
    """Run the killing ingest of `topic` on the bucket root; the finished process (returncode -9)."""
    import subprocess

    return subprocess.run([sys.executable, "-c", _INGEST_KILLED_AT_COMMIT, str(root), topic], env=env,
                          capture_output=True, text=True, timeout=300)
