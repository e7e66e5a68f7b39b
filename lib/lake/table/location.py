"""Where a table is: a bare name lives under <root>/tables, a path or URI is used as it is; the
tables under a root; and the consumer group that feeds a table by default, named after it."""

from __future__ import annotations

from pathlib import Path

from topiclake.archive.table import INGEST_GROUP_PREFIX
from topiclake.segments.storage import StorageLayout

GROUP_PREFIX = INGEST_GROUP_PREFIX  # a table's default group: GROUP_PREFIX + its name


def resolve_table_uri(layout: StorageLayout, name_or_location: str) -> str:
    """A bare name lives under <root>/tables; a path or URI is used as it is."""
    if "://" in name_or_location:
        return name_or_location
    if "/" in name_or_location or name_or_location.startswith("."):
        return str(Path(name_or_location).resolve())
    return str(layout.table_dir(name_or_location).resolve())


def table_filesystem(uri: str, root=None):
    """(pyarrow filesystem, base path) of a table location; `root`: the object-store root (S3Root)
    an s3:// location is under, whose server and keys pyarrow cannot find on its own."""
    import pyarrow.fs as pafs

    if root is not None and uri.startswith("s3://"):
        return root.pyarrow_filesystem(), uri[len("s3://"):]
    return pafs.FileSystem.from_uri(uri)


def root_table_uri(root, name_or_location: str) -> str:
    """resolve_table_uri under a storage root: a directory, or an object-store root (topiclake.store's
    S3Root), whose bare table names live under its tables/ prefix."""
    if isinstance(root, (str, Path)):
        return resolve_table_uri(StorageLayout(Path(root)), name_or_location)
    if "://" in name_or_location:
        return name_or_location
    return root.uri("tables", name_or_location)


def table_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def discover_tables(layout: StorageLayout) -> dict[str, str]:
    """name -> location of every Delta table directly under <root>/tables."""
    tables_dir = Path(layout.tables_dir)
    if not tables_dir.is_dir():
        return {}
    return {d.name: str(d.resolve()) for d in sorted(tables_dir.iterdir()) if (d / "_delta_log").is_dir()}


def discover_bucket_tables(root) -> dict[str, str]:
    """name -> s3:// location of every Delta table directly under tables/ of an object-store root
    (topiclake.store's S3Root): a "directory" there with a _delta_log in it."""
    from topiclake.store.objects import ObjectStore

    store = ObjectStore(root)
    tables = {}
    for prefix in sorted(store.list_dir("tables").prefixes):
        name = prefix.rsplit("/", 1)[-1]
        if f"{prefix}/_delta_log" in store.list_dir(prefix).prefixes:
            tables[name] = root.uri("tables", name)
    return tables
