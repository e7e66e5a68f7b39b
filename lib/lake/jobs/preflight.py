"""Checks that run before Spark starts: the storage root, the topics, the partitions and the
tables a job names. A mistake there is reported in well under a second with what to do about
it, instead of after the JVM and the executors have started.

Imports stay light (no pyspark, pyarrow or deltalake): this runs first in every job.
"""

from __future__ import annotations

from pathlib import Path

from topiclake.segments.settings import load_settings, storage_location, storage_root
from topiclake.segments.storage import StorageLayout, TopicRegistry

from ..errors import UsageError

ROOT_HINT = "pass --data DIR, or set $TOPICLAKE_ROOT or [storage] root in the settings file"


def resolve_root(config: str | None, data: str | None) -> Path:
    """The storage root the flags and settings name; it must be an existing directory."""
    return _existing_directory(storage_root(load_settings(config), data))


def resolve_tables_root(config: str | None, data: str | None):
    """For a command that serves object-store roots (sql, metrics, ingest): an existing directory
    (a Path), or an object-store root (topiclake.store's S3Root, its server and keys from
    [storage.s3] and the AWS environment)."""
    from topiclake.store.root import LocalRoot

    location = storage_location(load_settings(config), data)
    if isinstance(location, LocalRoot):
        return _existing_directory(location.path)
    return location


def sql_endpoint(config: str | None, explicit: str | None) -> str | None:
    """`topiclake sql`'s endpoint setting: --endpoint, else $TOPICLAKE_SQL_ENDPOINT, else [sql] endpoint."""
    import os

    from topiclake.segments.settings import section

    from ..sql.endpoint import ENDPOINT_ENV

    if explicit:
        return explicit
    if os.environ.get(ENDPOINT_ENV):
        return os.environ[ENDPOINT_ENV]
    value = section(load_settings(config), "sql").get("endpoint")
    return str(value) if value else None


def _existing_directory(root: Path) -> Path:
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise UsageError(f"storage root {root} {what}", hint=ROOT_HINT)
    return root


def client_security(config: str | None, command_config: str | None):
    """How the offsets mirror reaches a secured broker: --command-config, else [client]."""
    from topiclake.security.client_config import load
    from topiclake.segments.errors import InvalidConfigError

    try:
        return load(load_settings(config) if command_config is None else {}, command_config)
    except InvalidConfigError as exc:
        raise UsageError(str(exc), hint="see docs: a Kafka client-properties file or [client] in the settings") \
            from None


def check_topics(root, topics: tuple[str, ...] | list[str]) -> dict[str, int]:
    """Every topic is registered under the root (a directory, or an object-store root's
    topics/<topic>.json objects): {topic: partitions}."""
    if not topics:
        raise UsageError("no topic given", hint="pass --topic NAME")
    if isinstance(root, Path):
        known = {meta.name: meta.partitions for meta in TopicRegistry(StorageLayout(root)).list()}
    else:
        from ..log.roots import BucketLog

        known = {name: meta.partitions for name, meta in BucketLog(root).topics().items()}
    for topic in topics:
        if topic not in known:
            names = ", ".join(sorted(known)) or "none"
            raise UsageError(f"unknown topic {topic!r} under {root} (topics there: {names})",
                             hint="`topiclake topics list` shows the topics; check --data")
    return {topic: known[topic] for topic in topics}


def check_partitions(root, topic: str, partitions: list[int] | None) -> list[int]:
    """The named partitions of a registered topic (all of them when None)."""
    count = check_topics(root, [topic])[topic]
    for p in partitions or ():
        if p >= count:
            raise UsageError(f"topic {topic!r} has partitions 0-{count - 1}, not {p}")
    return list(partitions) if partitions else list(range(count))


def check_table(root, table: str) -> None:
    """A table a job reads must exist (bare names live under <root>/tables; URIs are not checked:
    only the object store can tell)."""
    if "://" in table or not isinstance(root, Path):  # an object-store root: the job's own check says it
        return
    layout = StorageLayout(root)
    local = Path(table) if "/" in table or table.startswith(".") else Path(layout.tables_dir) / table
    if not (local / "_delta_log").is_dir():
        known = ", ".join(sorted(d.parent.name for d in Path(layout.tables_dir).glob("*/_delta_log"))) or "none"
        raise UsageError(f"no Delta table at {local} (tables under {layout.tables_dir}: {known})",
                         hint="ingest the topic first, or check --table and --data")
