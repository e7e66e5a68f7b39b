"""An executor's read of its task's bytes on an object-store root (log/bucket.py plans the tasks,
log/decode.py decodes what this returns, as it decodes a mapped segment file's range)."""

from __future__ import annotations

from topiclake.store.errors import ObjectNotFound
from topiclake.store.objects import ObjectStore
from topiclake.store.root import S3Root

from ..errors import SegmentChangedError


def read_object_range(task: dict) -> bytes:
    """An executor's ranged GET of its task's bytes; a flush object deleted under the task (sealed,
    then past its grace period) is a clear error: nothing is committed, the run plans again."""
    root: S3Root = task["root"]
    try:
        return ObjectStore(root).get_range(task["path"], task["start"], task["end"])
    except ObjectNotFound:
        raise SegmentChangedError(f"{root.uri(task['path'])} was deleted after planning (sealed into a segment "
                                  "and past its delete grace, or dropped by retention); nothing was committed, "
                                  "run again") from None
