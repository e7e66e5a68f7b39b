"""Topics written as many small time-stamped segments, for the retention tests and commands."""

from __future__ import annotations

from topiclake.segments.batch import Record, build_batch
from topiclake.segments.log import Log
from topiclake.segments.storage import StorageLayout, TopicRegistry


DAY = 86_400_000
T0 = 1_714_521_600_000


def make_log(root, topic="events", *, config=None, batches=30, start_ts=T0, step=DAY // 10):
    layout = StorageLayout(root)
    TopicRegistry(layout).create(topic, 1, {"segment.bytes": "600", **(config or {})})
    log = Log.open(layout.log_dir(topic, 0), TopicRegistry(layout).get(topic).log_config, now_ms=start_ts)
    for i in range(batches):
        ts = start_ts + i * step
        log.append(build_batch([Record(0, ts, b"k%d" % i, b"v" * 40, ()), Record(1, ts, b"k", b"w" * 40, ())]),
                   now_ms=ts)
    log.close()
    return layout.log_dir(topic, 0)


def bases(directory):
    return sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
