"""Benchmark data shared by the benchmarks: batches shaped like real event streams."""

from __future__ import annotations

import random

from topiclake.segments.batch import Record, build_batch

RECORDS_PER_BATCH = 1000


def template_batch(seed: int, codec: str, *, base_timestamp: int = 1_700_000_000_000,
                   spread_ms: int = 60_000) -> bytes:
    """1000 records with 16-byte keys and 100-byte JSON-ish values (compressible like real data)."""
    rng = random.Random(seed)
    records = []
    for i in range(RECORDS_PER_BATCH):
        key = b"user-%011d" % rng.randrange(10**11)
        value = b'{"id":%d,"event":"%s","amount":%d.%02d,"session":"%s"' % (
            rng.randrange(10**9), rng.choice([b"click", b"view", b"purchase", b"scroll"]),
            rng.randrange(10**5), rng.randrange(100), rng.randbytes(12).hex().encode())
        records.append(Record(i, base_timestamp + rng.randrange(spread_ms), key, value.ljust(99, b" ") + b"}"))
    return build_batch(records, base_offset=0, compression=codec)
