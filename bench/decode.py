"""Benchmark: record batches -> Arrow with topiclake, against kafka-python's reader, in one run.

Batches of 1000 records (16-byte keys, 100-byte values) for each codec (none, lz4, zstd):
topiclake decodes all of them into a pyarrow.Table (CRC checked); kafka-python's pure-Python
reader (MemoryRecords -> DefaultRecordBatch, reading key and value of every record, no CRC check)
decodes a subset, and its records/s is extrapolated. MB/s counts the batch bytes as stored.
Rates use process CPU time (user + system, page faults included), which a machine shared with
other work disturbs far less than wall time; wall-clock rates are printed beside them.
For lz4 and zstd, the codec library alone decompresses the same batches' records sections in the
same run (the best of python-lz4 / python-zstandard returning bytes and cramjam decompressing into
one reused buffer), and "codec_ratio" is topiclake's decode rate / that rate: 1.0 would mean that
walking, CRC-checking and decoding to Arrow cost nothing on top of the decompression itself.
For uncompressed batches the machine's memory floor is measured in the same run: the CRC-32C of
every byte (the kernel's own CRC) and one copy of every byte into a reused buffer, the least any
decoder that checks and copies its input must do; "floor_ratio" is topiclake's rate / the floor's.
The last line is one JSON object; "ratio" is uncompressed topiclake / kafka-python records/s.

    python bench/decode.py            # >= 200 MB of uncompressed batches per codec
    python bench/decode.py --mb 50    # quicker
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy (loaded by pyarrow) must not spin idle threads

import cramjam
import lz4.frame
import numpy
import zstandard
from kafka.record.memory_records import MemoryRecords

from _data import RECORDS_PER_BATCH, template_batch
from topiclake.segments import arrow
from topiclake.segments.batch import HEADER_SIZE, iter_batches, set_base_offset

TEMPLATES = 8  # distinct batches, tiled (with their base offsets patched) up to the wanted size
CODECS = ("none", "lz4", "zstd")


def make_log(codec: str, batches: int) -> bytes:
    templates = [template_batch(seed, codec) for seed in range(TEMPLATES)]
    parts = [templates[i % TEMPLATES] for i in range(batches)]
    log = bytearray(b"".join(parts))
    pos = 0
    for i, part in enumerate(parts):
        set_base_offset(log, pos, i * RECORDS_PER_BATCH)
        pos += len(part)
    return bytes(log)


def timed(fn, *args) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one call."""
    cpu, wall = time.process_time(), time.perf_counter()
    fn(*args)
    return time.process_time() - cpu, time.perf_counter() - wall


def time_topiclake(log: bytes, repeat: int) -> tuple[float, float]:
    runs = [timed(arrow.decode_to_arrow, log) for _ in range(repeat)]
    return min(cpu for cpu, _ in runs), min(wall for _, wall in runs)


def kafka_python_read(log: bytes) -> None:
    count = 0
    records = MemoryRecords(log)
    while (batch := records.next_batch()) is not None:
        for record in batch:
            record.key, record.value  # noqa: B018  (what a consumer reads)
            count += 1
    assert count % RECORDS_PER_BATCH == 0 and count > 0


def memory_floor_seconds(log: bytes, repeat: int) -> float:
    """Best CPU seconds of checking the CRC of every byte of `log` and copying every byte once
    (into a buffer written before, as the decoder's reused pages are)."""
    source = numpy.frombuffer(log, dtype=numpy.uint8)
    target = numpy.ones_like(source)

    def check_and_copy() -> None:
        arrow._decode.crc32c(log)
        numpy.copyto(target, source)

    return min(timed(check_and_copy)[0] for _ in range(repeat))


def codec_alone_seconds(codec: str, log: bytes, repeat: int) -> tuple[float, str]:
    """Best CPU seconds of the codec library alone inflating every batch's records section, and
    which way of calling it was fastest (bytes out, or into one reused buffer)."""
    payloads = [bytes(b.data[HEADER_SIZE:]) for b in iter_batches(log, validate=False)]
    into = bytearray(4 * max(len(decompress_library(codec, p)) for p in payloads[:8]))
    decompress_into = (cramjam.lz4 if codec == "lz4" else cramjam.zstd).decompress_into
    ways = {
        ("python-lz4" if codec == "lz4" else "python-zstandard"): lambda: [decompress_library(codec, p)
                                                                          for p in payloads],
        "cramjam, into a reused buffer": lambda: [decompress_into(p, into) for p in payloads],
    }
    best = {name: min(timed(way)[0] for _ in range(repeat)) for name, way in ways.items()}
    name = min(best, key=best.__getitem__)
    return best[name], name


_ZSTD = zstandard.ZstdDecompressor()


def decompress_library(codec: str, payload: bytes) -> bytes:
    return lz4.frame.decompress(payload) if codec == "lz4" else _ZSTD.decompress(payload)


def prefix_of_batches(log: bytes, batches: int) -> bytes:
    """The first `batches` whole batches of `log`."""
    pos = 0
    for _ in range(batches):
        pos += 12 + int.from_bytes(log[pos + 8 : pos + 12], "big")
    return log[:pos]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=200, help="uncompressed batch MB per codec (default 200)")
    parser.add_argument("--kafka-python-batches", type=int, default=100,
                        help="batches kafka-python decodes per codec; its rate is extrapolated (default 100)")
    parser.add_argument("--repeat", type=int, default=3, help="topiclake runs per codec, best kept (default 3)")
    args = parser.parse_args()
    if not arrow.HAS_NATIVE:
        print("WARNING: native extension missing, timing the pure-Python reference decoder")

    batch_bytes = len(template_batch(0, "none"))
    batches = max(1, -(-int(args.mb * 1e6) // batch_bytes))
    results = {}
    for codec in CODECS:
        log = make_log(codec, batches)
        records = batches * RECORDS_PER_BATCH
        seconds, wall = time_topiclake(log, args.repeat)
        subset_batches = min(batches, args.kafka_python_batches)
        subset = prefix_of_batches(log, subset_batches)
        kp_seconds, kp_wall = timed(kafka_python_read, subset)
        subset_records = subset_batches * RECORDS_PER_BATCH
        tl_rate, kp_rate = records / seconds, subset_records / kp_seconds
        results[codec] = {
            "batches": batches, "records": records, "stored_mb": round(len(log) / 1e6, 1),
            "topiclake_records_per_s": round(tl_rate), "topiclake_mb_per_s": round(len(log) / 1e6 / seconds, 1),
            "topiclake_wall_records_per_s": round(records / wall),
            "kafka_python_records": subset_records, "kafka_python_records_per_s": round(kp_rate),
            "kafka_python_mb_per_s": round(len(subset) / 1e6 / kp_seconds, 1),
            "kafka_python_wall_records_per_s": round(subset_records / kp_wall), "ratio": round(tl_rate / kp_rate, 1),
        }
        r = results[codec]
        codec_note = ""
        if codec == "none" and arrow.HAS_NATIVE:
            floor_seconds = memory_floor_seconds(log, args.repeat)
            r.update(floor_mb_per_s=round(len(log) / 1e6 / floor_seconds, 1),
                     floor_ratio=round(floor_seconds / seconds, 2))
            codec_note = (f" | memory floor (CRC + one copy) {r['floor_mb_per_s']:.1f} MB/s: "
                          f"decode/floor {r['floor_ratio']:.2f}")
        if codec != "none":
            codec_seconds, way = codec_alone_seconds(codec, log, args.repeat)
            r.update(codec_alone_records_per_s=round(records / codec_seconds), codec_alone=way,
                     codec_ratio=round(codec_seconds / seconds, 2))
            codec_note = (f" | {way} alone {records / codec_seconds / 1e6:5.2f} M rec/s: "
                          f"decode/codec-alone {r['codec_ratio']:.2f}")
        print(f"{codec:>5}: {r['stored_mb']:6.1f} MB stored, {records:,} records | topiclake "
              f"{tl_rate / 1e6:5.2f} M rec/s {r['topiclake_mb_per_s']:6.1f} MB/s (best of {args.repeat}; wall "
              f"{records / wall / 1e6:.2f} M rec/s) | kafka-python {kp_rate / 1e3:5.1f} k rec/s "
              f"{r['kafka_python_mb_per_s']:4.1f} MB/s (measured on the first {subset_records:,} records, "
              f"extrapolated; wall {subset_records / kp_wall / 1e3:.1f} k rec/s) | {r['ratio']:.1f}x{codec_note}",
              flush=True)
        del log, subset
    print(json.dumps({"benchmark": "decode_to_arrow", "native": arrow.HAS_NATIVE, "mb_per_codec": args.mb,
                      "clock": "process CPU time", "kafka_python": "subset, extrapolated",
                      "codecs": results, "ratio": results["none"]["ratio"]}))


if __name__ == "__main__":
    main()
