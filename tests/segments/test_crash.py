"""Kill a real appending process with SIGKILL: every acknowledged offset must survive."""

import os
import signal
import subprocess
import sys
import time

import pytest

from topiclake.segments.batch import iter_batches
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log

WRITER = r"""
import sys
from topiclake.segments.config import LogConfig
from topiclake.segments.log import Log
from topiclake.segments.batch import Record, build_batch

log = Log.open(sys.argv[1], LogConfig(flush_messages=1, segment_bytes=int(sys.argv[2]), index_interval_bytes=200))
i = 0
while True:
    batch = build_batch([Record(0, 1000 + i, str(i).encode(), b"v" * (i % 50))], base_offset=0)
    result = log.append(batch)
    print(result.first_offset, flush=True)  # acknowledged: flushed to disk before printing
    i += 1
"""


@pytest.mark.parametrize("segment_bytes, wait", [(1 << 30, 0.6), (3000, 0.9)])
def test_sigkill_keeps_every_acknowledged_offset(tmp_path, segment_bytes, wait):
    directory = tmp_path / "t-0"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(segment_bytes)],
                            stdout=subprocess.PIPE, text=True)
    acked = []
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline or len(acked) < 20:
        line = proc.stdout.readline()
        if not line:
            break
        acked.append(int(line))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    acked += [int(line) for line in proc.stdout.read().split()]
    assert acked == list(range(len(acked))) and len(acked) >= 20
    log = Log.open(directory, LogConfig(segment_bytes=segment_bytes))
    assert not log.load_result.had_clean_shutdown
    assert log.log_end_offset >= len(acked)
    offset, keys = 0, []
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        for batch in iter_batches(result.to_bytes()):
            keys += [(r.offset, r.key) for r in batch.records()]
        offset = result.next_offset
    assert keys == [(i, str(i).encode()) for i in range(log.log_end_offset)]
    log.append(iter_batches_from_key(log.log_end_offset))
    log.close()


def iter_batches_from_key(i):
    from topiclake.segments.batch import Record, build_batch
    return build_batch([Record(0, 1, str(i).encode(), b"x")], base_offset=0)
