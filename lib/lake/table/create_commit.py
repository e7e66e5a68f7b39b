"""A table's creating commit, read in DESCRIBE HISTORY as delta-spark's first write reads.

delta-rs's create (create_table_with_add_actions) records the operation "CREATE TABLE" with the
whole table metadata, protocol and its own location in commitInfo.operationParameters, and refuses
`operation*` keys in custom metadata. An ingest's first commit is a write of data and offsets, so we
record it as delta-spark records a first `df.write.format("delta").save(path)`: operation WRITE,
parameters `mode` and `partitionBy`. delta-rs still builds every action (protocol, metadata, add
and txn actions) in a scratch directory; we rewrite commitInfo and publish that file as version 0
with create-if-absent (a hard link in a directory, If-None-Match on a bucket), so two creators
still race safely: one creates the table, the other finds it and commits on top.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Sequence

from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, CommitProperties, create_table_with_add_actions

FIRST_COMMIT = "_delta_log/00000000000000000000.json"


def create_table(uri: str, schema: DeltaSchema, adds: Sequence[AddAction], partition_by: Sequence[str],
                 commit_properties: CommitProperties, store=None) -> bool:
    """Create the table at `uri` with `adds` in version 0; False when it exists already (nothing
    written). `store`: the ObjectStore of the bucket root `uri` is under, with `uri`'s key prefix
    (`(store, prefix)`); None for a directory."""
    with tempfile.TemporaryDirectory(prefix="topiclake-create-") as scratch:
        create_table_with_add_actions(scratch, schema, list(adds), mode="error",
                                      partition_by=list(partition_by) or None, commit_properties=commit_properties)
        lines = (Path(scratch) / FIRST_COMMIT).read_bytes().splitlines()
    data = b"\n".join(_as_first_write(line, partition_by) for line in lines) + b"\n"
    if store is not None:
        return _publish_object(store, data)
    from topiclake.store.root import LocalRoot, parse_root

    root = parse_root(uri)  # a path or file:///path: `store` is None only for a directory
    assert isinstance(root, LocalRoot), uri
    return _publish_file(root.path, data)


def _as_first_write(line: bytes, partition_by: Sequence[str]) -> bytes:
    action = json.loads(line)
    info = action.get("commitInfo")
    if info is None:
        return line
    info["operation"] = "WRITE"
    info["operationParameters"] = {"mode": "ErrorIfExists", "partitionBy": json.dumps(list(partition_by))}
    info.setdefault("isBlindAppend", True)
    return json.dumps(action, separators=(",", ":")).encode()


def _publish_file(table_dir: Path, data: bytes) -> bool:
    """Version 0 appears whole or not at all: written under a name Delta ignores, then linked to
    its name, which fails when another writer made it first."""
    log_dir = table_dir / "_delta_log"
    log_dir.mkdir(parents=True, exist_ok=True)
    scratch = log_dir / f".{uuid.uuid4().hex}.json.tmp"
    with open(scratch, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(scratch, table_dir / FIRST_COMMIT)
    except FileExistsError:
        return False
    finally:
        scratch.unlink()
    dir_fd = os.open(log_dir, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def _publish_object(store_and_prefix, data: bytes) -> bool:
    from topiclake.store.errors import ObjectExists
    from topiclake.store.objects import CREATE

    store, prefix = store_and_prefix
    try:
        store.put(f"{prefix}/{FIRST_COMMIT}" if prefix else FIRST_COMMIT, data, mode=CREATE)
    except ObjectExists:
        return False
    return True
