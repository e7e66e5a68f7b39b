"""Fetch with many partitions, a KIP-227 session against sessionless (issue 33 point 1): one consumer
of --partitions partitions of which --active have records, the others idle, as a consumer of a
wide topic sees it most of the time.

A `topiclake broker start` process; --active partitions each get --batches batches of 10 records
of 100 bytes. A raw client (topiclake's kio client, Fetch v12) reads them all from offset 0, one
batch per partition per fetch (partition_max_bytes = one batch), in rounds alternating the modes
(--repeat; each figure is the median):

- sessionless (librdkafka's way): every fetch names every partition, every answer names every one;
- session (Kafka's Java consumer's way): the first fetch names every partition and opens a session,
  the others name only the partitions whose fetch offset moved and hear only about those with records.

Reported per mode: fetches/s, the broker's CPU per fetch (/proc), the client's CPU per fetch (kio
encoding the request and decoding the answer: Python, so a larger share than a Java client's), and
"ratio" = session fetches/s / sessionless fetches/s, "broker_cpu_ratio" = session CPU per fetch /
sessionless. The last line is one JSON object.

    python bench/fetch_sessions.py [--partitions 2000] [--active 20] [--batches 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _broker import cpu_seconds, create_topic, running_broker
from _kafka import median_of

TOPIC = "bench-sessions"
MAX_WAIT = datetime.timedelta(milliseconds=500)


def fill(bootstrap: str, partitions: int, active: int, batches: int) -> tuple[int, int]:
    """(records per batch, bytes per batch): `batches` batches on each of the first `active` partitions."""
    from kio.schema.produce.v9 import request as produce_req

    from topiclake.client.conn import BrokerConnection
    from topiclake.segments.batch import Record, build_batch

    create_topic(bootstrap, TOPIC, partitions)
    records = [Record(i, 1_700_000_000_000 + i, None, b"v" * 100, ()) for i in range(10)]
    data = build_batch(records, base_offset=0, compression="none")
    request = produce_req.ProduceRequest(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
                                         topic_data=(produce_req.TopicProduceData(name=TOPIC, partition_data=tuple(
                                             produce_req.PartitionProduceData(index=p, records=data)
                                             for p in range(active))),))
    with BrokerConnection(bootstrap, timeout=60) as client:
        for _ in range(batches):
            for topic in client.request(request).responses:
                for p in topic.partition_responses:
                    if p.error_code != 0:
                        raise SystemExit(f"produce to partition {p.index} failed: {p.error_code}")
    return len(records), len(data)


def read_all(bootstrap: str, partitions: int, active: int, end: int, batch_bytes: int, session: bool) -> int:
    """Reads every active partition to `end`; returns the fetches it took."""
    from kio.schema.fetch.v12 import request as fetch_req

    from topiclake.client.conn import BrokerConnection
    from topiclake.segments.batch import iter_batches

    def part(index: int, offset: int):
        return fetch_req.FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=batch_bytes)

    idle = tuple(part(p, 0) for p in range(active, partitions))  # empty partitions: offset 0 is their end
    offsets = dict.fromkeys(range(active), 0)
    moved = set(offsets)  # partitions whose offset the broker has not been told
    session_id, epoch, fetches = 0, 0 if session else -1, 0
    with BrokerConnection(bootstrap, timeout=60) as client:
        while any(o < end for o in offsets.values()):
            if session and epoch > 0:
                named = tuple(part(p, offsets[p]) for p in sorted(moved))
            else:
                named = tuple(part(p, o) for p, o in offsets.items()) + idle
            moved.clear()
            response = client.request(fetch_req.FetchRequest(
                max_wait=MAX_WAIT, min_bytes=1, max_bytes=50 << 20, session_id=session_id, session_epoch=epoch,
                topics=(fetch_req.FetchTopic(topic=TOPIC, partitions=named),) if named else (),
                forgotten_topics_data=()))
            fetches += 1
            if response.error_code != 0:
                raise SystemExit(f"fetch failed: {response.error_code}")
            if session:
                if response.session_id == 0:
                    raise SystemExit("the broker made no session")
                session_id, epoch = response.session_id, epoch + 1
            for topic in response.responses:
                for p in topic.partitions:
                    for batch in iter_batches(p.records, validate=False):
                        offsets[p.partition_index] = batch.header.next_offset
                        moved.add(p.partition_index)
    return fetches


def measure(bootstrap: str, pid: int, args, end: int, batch_bytes: int, session: bool) -> dict:
    broker_before, client_before = cpu_seconds(pid), time.process_time()
    start = time.perf_counter()
    fetches = read_all(bootstrap, args.partitions, args.active, end, batch_bytes, session)
    elapsed = time.perf_counter() - start
    return {"fetches": fetches, "fetches_per_s": fetches / elapsed,
            "broker_cpu_ms_per_fetch": (cpu_seconds(pid) - broker_before) * 1000 / fetches,
            "client_cpu_ms_per_fetch": (time.process_time() - client_before) * 1000 / fetches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--active", type=int, default=20, help="partitions with records (the first ones)")
    parser.add_argument("--batches", type=int, default=100, help="batches on each active partition")
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the modes (medians count)")
    args = parser.parse_args()
    rounds: dict[str, list[dict]] = {"sessionless": [], "session": []}
    load = os.getloadavg()[0]
    with running_broker() as (bootstrap, _data, pid):
        per_batch, batch_bytes = fill(bootstrap, args.partitions, args.active, args.batches)
        end = per_batch * args.batches
        read_all(bootstrap, args.partitions, args.active, end, batch_bytes, True)  # warm-up: open, cache
        for i in range(args.repeat):
            for mode in rounds:
                rounds[mode].append(measure(bootstrap, pid, args, end, batch_bytes, mode == "session"))
                print(f"round {i + 1}, {mode}: " + ", ".join(f"{k} {v:,.2f}" for k, v in rounds[mode][-1].items()),
                      flush=True)
    medians = {mode: median_of(measured) for mode, measured in rounds.items()}
    session, sessionless = medians["session"], medians["sessionless"]
    result = {"bench": "fetch_sessions", "partitions": args.partitions, "active": args.active,
              "batches": args.batches, "rounds": args.repeat, "load_average_start": round(load, 2),
              "load_average_end": round(os.getloadavg()[0], 2)}
    for mode, figures in medians.items():
        result.update((f"{mode}_{name}", round(value, 3)) for name, value in figures.items())
    result["ratio"] = round(session["fetches_per_s"] / sessionless["fetches_per_s"], 3)
    result["broker_cpu_ratio"] = round(session["broker_cpu_ms_per_fetch"] / sessionless["broker_cpu_ms_per_fetch"], 3)
    summary = "; ".join(f"{mode} {figures['fetches_per_s']:,.0f} fetches/s, "
                        f"{figures['broker_cpu_ms_per_fetch']:.2f} ms of broker CPU each"
                        for mode, figures in medians.items())
    print(f"medians of {args.repeat} rounds, {args.partitions} partitions, {args.active} with records: {summary}; "
          f"ratio {result['ratio']}, broker CPU ratio {result['broker_cpu_ratio']}")
    print(json.dumps(result))

if __name__ == "__main__":
    main()
