"""The storage root as the console reads it, without the broker: a directory, or an object-store
root (a bucket and prefix). Both answer the same questions, so every page reads either:

    exists()                        whether the root is there at all
    cluster_id()                    from cluster/meta.json
    registrations() / live_endpoints(protocol)
                                    the brokers registered in the root (a bucket holds none:
                                    the console is given --bootstrap there)
    partition_bytes(topic, p)       bytes of the partition's `.log` files or objects
    table_names() / table_uri(n)    the Delta tables under tables/
    quality_results()               (path under quality/results, its JSON text) of every result
    quality_site()                  the Data Docs directory (a bucket's: mirrored locally), or None
    registry()                      the schema registry's state, replayed from `_schemas`
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Iterator

from topiclake.segments.storage import StorageLayout

from .bucket_site import SiteMirror

LOG_SUFFIX = ".log"
RESULTS = "results"


class DirectoryRoot:
    def __init__(self, path: Path):
        self.layout = StorageLayout(path)
        self.root = self.layout.root  # as the pages show it

    def exists(self) -> bool:
        return self.layout.root.is_dir()

    def cluster_id(self) -> str | None:
        try:
            return json.loads(self.layout.cluster_meta_file.read_text())["cluster_id"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def registrations(self) -> list:
        from topiclake.client.registrations import registrations

        return registrations(self.layout)

    def live_endpoints(self, protocol: str | None) -> list[tuple[str, str]]:
        from topiclake.client.registrations import live_endpoints

        return live_endpoints(self.layout, protocol)

    def partition_bytes(self, topic: str, partition: int) -> int:
        try:
            with os.scandir(self.layout.log_dir(topic, partition)) as entries:
                return sum(e.stat().st_size for e in entries if e.name.endswith(LOG_SUFFIX) and e.is_file())
        except (OSError, ValueError):
            return 0

    def table_names(self) -> list[str]:
        tables = self.layout.tables_dir
        if not tables.is_dir():
            return []
        return sorted(p.name for p in tables.iterdir() if (p / "_delta_log").is_dir())

    def table_uri(self, name: str) -> str:
        return str(self.layout.tables_dir / name)

    def quality_site(self) -> Path | None:
        from topiclake.lake.quality.gate import quality_dir

        return quality_dir(self.layout.root)

    def quality_results(self) -> Iterator[tuple[PurePosixPath, str]]:
        from topiclake.lake.quality.gate import quality_dir

        results = quality_dir(self.layout.root) / RESULTS
        if not results.is_dir():
            return
        for path in results.rglob("*.json"):
            try:
                yield PurePosixPath(path.relative_to(results).as_posix()), path.read_text()
            except OSError:
                continue

    def registry(self):
        from topiclake.registry.log_replay import load_state

        return load_state(self.layout.root)


class BucketRoot:
    def __init__(self, root):
        from topiclake.store.objects import ObjectStore

        self.root = root  # an S3Root: str() is its URL, no secrets
        self.store = ObjectStore(root)
        self.site = SiteMirror(self.store)
        from topiclake.lake.table import delta

        delta.serve_root(root)  # its tables are opened with its server and keys

    def exists(self) -> bool:
        return self.store.head("cluster/meta.json") is not None or any(True for _ in self.store.list("topics"))

    def cluster_id(self) -> str | None:
        from topiclake.store.errors import ObjectNotFound

        try:
            return json.loads(self.store.get("cluster/meta.json"))["cluster_id"]
        except (ObjectNotFound, ValueError, KeyError, TypeError):
            return None

    def registrations(self) -> list:
        return []

    def live_endpoints(self, protocol: str | None) -> list[tuple[str, str]]:
        return []

    def partition_bytes(self, topic: str, partition: int) -> int:
        from topiclake.objectlog.keys import PartitionKeys

        return sum(info.size for info in self.store.list(PartitionKeys(topic, partition).prefix)
                   if info.key.endswith(LOG_SUFFIX))

    def table_names(self) -> list[str]:
        from topiclake.lake.table.location import discover_bucket_tables

        return sorted(discover_bucket_tables(self.root))

    def table_uri(self, name: str) -> str:
        return self.root.uri("tables", name)

    def quality_site(self) -> Path | None:
        return self.site.current()

    def quality_results(self) -> Iterator[tuple[PurePosixPath, str]]:
        from topiclake.store.errors import ObjectNotFound

        prefix = f"quality/{RESULTS}"
        for info in self.store.list(prefix):
            if not info.key.endswith(".json"):
                continue
            try:
                yield PurePosixPath(info.key[len(prefix) + 1:]), self.store.get(info.key).decode()
            except ObjectNotFound:  # removed between the listing and the read
                continue

    def registry(self):
        from topiclake.registry.log_replay import load_bucket_state

        return load_bucket_state(self.store)


def topic_bytes(root: DirectoryRoot | BucketRoot, topic: str, partitions: list[int]) -> int:
    return sum(root.partition_bytes(topic, p) for p in partitions)


def console_root(root) -> DirectoryRoot | BucketRoot:
    """`root`: a directory (a Path) or an object-store root (topiclake.store's S3Root)."""
    if isinstance(root, (str, Path)):
        return DirectoryRoot(Path(root))
    return BucketRoot(root)
