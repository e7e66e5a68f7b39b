"""A leader's flush of its open segment's new bytes: create `<base>.e<E>.log` once, then the fence
(docs/OBJECT-STORAGE.md, "Write path", steps 2-3). Only when both pass may the batches in it be
acknowledged.

A create that fails for want of the server is retried with the same bytes under the same key until
the deadline (the oldest produce request waiting on it times out then); a create that finds the
key taken reads the object: identical bytes are a retry whose first attempt landed (done), any
other bytes mean another writer used this leader's key, and the leader must resign.
"""

from __future__ import annotations

import time

from topiclake.segments.errors import TopiclakeError
from topiclake.store.errors import ObjectExists, ObjectNotFound, StoreUnavailable
from topiclake.store.objects import CREATE, ObjectStore

from .fence import BucketFence

RETRY_BACKOFF_S = (0.05, 0.1, 0.2, 0.5, 1.0)


class FlushTimedOut(TopiclakeError):
    """The store did not take the object before the deadline: nothing in it is acknowledged
    (producers get a retriable error); the same bytes may be flushed again later."""


class FlushConflict(TopiclakeError):
    """The flush key holds other bytes than this leader's: it must resign."""


def create_once(store: ObjectStore, key: str, data: bytes | memoryview, *, deadline: float) -> bool:
    """Create `key` with `data` (If-None-Match), retrying while the store is unavailable until
    `deadline` (time.monotonic()). True: created now; False: it was there with the same bytes."""
    for attempt in range(1 << 30):
        try:
            store.put(key, data, mode=CREATE)
            return True
        except ObjectExists:
            try:
                existing = store.get(key)
            except ObjectNotFound:  # deleted in between: only garbage collection does that
                raise FlushConflict(f"{store.root.uri(key)} vanished after a create found it") from None
            if existing != data:  # a memoryview compares as bytes (no copy of a mapped segment)
                raise FlushConflict(f"{store.root.uri(key)} holds {len(existing)} other bytes than the "
                                    f"{len(data)} this leader flushes") from None
            return False
        except StoreUnavailable as exc:
            pause = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
            if time.monotonic() + pause >= deadline:
                raise FlushTimedOut(f"flush of {store.root.uri(key)} not stored before its deadline: {exc}") from exc
            time.sleep(pause)
    raise AssertionError("unreachable")


def flush(fence: BucketFence, base_offset: int, epoch: int, data: bytes, *, deadline: float) -> str:
    """Create the flush object of `data` (batches starting at `base_offset`, stamped `epoch`),
    then check the fence (LeaderFenced). Returns its key once its batches may be acknowledged."""
    key = fence.keys.flush(base_offset, epoch)
    create_once(fence.store, key, data, deadline=deadline)
    fence.check(epoch)
    return key
