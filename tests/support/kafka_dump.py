"""Running Kafka's DumpLogSegments over files and reading what it prints."""

from __future__ import annotations

import re
from pathlib import Path

RECORD = re.compile(r"^\| offset: (\d+) .*?headerKeys: \[([^\]]*)\](?: key: (.*?))?(?: payload: (.*))?$")
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .*?isTransactional: (\w+) isControl: (\w+)"
                   r".*? compresscodec: (\w+) crc: \d+ isvalid: (\w+)$")


def dump(kafka_tools, *files: Path) -> tuple[str, dict[str, list[tuple[int, int]]]]:
    """DumpLogSegments over `files`: its output, and the offset gaps it reports per .log file. It
    must exit 0 and report no error: no index entry that does not match the log, no time index
    entry out of order or off its batch's largest timestamp, no invalid bytes, no exception."""
    done = kafka_tools.run("kafka-dump-log", "--deep-iteration", "--print-data-log", "--files",
                           ",".join(str(f) for f in files))
    for stream in (done.stdout, done.stderr):
        for problem in ("ismatch", "out of order", "not found", "invalid bytes", "orrupt", "xception", "isvalid: false"):
            assert problem not in stream, [line for line in stream.splitlines() if problem in line][:5]
    gaps: dict[str, list[tuple[int, int]]] = {}
    for block in done.stderr.split("Non-consecutive offsets in ")[1:]:
        name, *pairs = block.splitlines()
        gaps[Path(name.strip()).name] = [tuple(map(int, p.split(" is followed by "))) for p in pairs if p.strip()]
    return done.stdout, gaps


def dump_segment_objects(kafka_tools, store, entry, directory: Path) -> tuple[str, dict[str, list[tuple[int, int]]]]:
    """`dump` over a closed segment's objects in a bucket (a manifest's SegmentEntry), downloaded
    under a segment's file names (`<base>.log`, `.index`, `.timeindex`) into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    local = []
    for key, suffix in ((entry.key, ".log"), (entry.index_key, ".index"), (entry.time_index_key, ".timeindex")):
        path = directory / f"{entry.base_offset:020d}{suffix}"
        path.write_bytes(store.get(key))
        local.append(path)
    return dump(kafka_tools, *local)
