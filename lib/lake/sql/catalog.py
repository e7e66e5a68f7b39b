"""The tables a SQL session sees: a session whose new tables go under the root's tables/, and the
root's tables by name (for `topiclake sql` and the standing SQL server alike)."""

from __future__ import annotations

from pathlib import Path

from topiclake.segments.storage import StorageLayout

from ..table.location import discover_bucket_tables, discover_tables
from .query import use_root, use_tables_location


def open_catalog(root, *, app_name: str, master: str | None, conf: dict[str, str]):
    """A session whose new tables go under the root's tables/, and how to list the root's tables
    (name -> location): a directory (Path), or an object-store root (S3Root, through s3a)."""
    from ..spark.session import get_session

    if isinstance(root, Path):
        layout = StorageLayout(root)
        spark = get_session(app_name, master=master, conf=conf, long_queries=True)
        use_root(spark, layout)
    else:
        spark = get_session(app_name, master=master, conf=conf, long_queries=True, root=root)
        use_tables_location(spark, root.uri("tables"))
    return spark, lambda: discover_names(root)


def discover_names(root) -> dict[str, str]:
    return discover_tables(StorageLayout(root)) if isinstance(root, Path) else discover_bucket_tables(root)
