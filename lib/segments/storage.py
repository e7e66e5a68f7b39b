"""The shared-storage layout and the topic registry (Kafka's ZooKeeper/KRaft registry as files).

    <root>/cluster/meta.json           {"cluster_id": <22 chars>, "version": 0}, created once
    <root>/cluster/brokers/<id>.json   broker registrations (written by the broker)
    <root>/cluster/broker-configs.json dynamic broker configs: "" is the cluster-wide default
                                       (log.retention.ms, min.insync.replicas, ...: topic defaults)
    <root>/topics/<topic>.json         {"name", "topic_id", "partitions", "config": {overrides}}
    <root>/log/<topic>-<partition>/    Kafka's partition directories
    <root>/tables/<name>/              Delta tables

Topic names are checked with Kafka's rules before they ever reach a path, so a name can never
escape the root (`../x`, `a/b`, `.`, `..`).
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import json
import os
import re
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from topiclake.store.errors import RootError
from topiclake.store.root import LocalRoot, is_url, parse_root

from .atomic import atomic_write, create_exclusive
from .config import LogConfig
from .config_store import ConfigStore
from .errors import (InvalidPartitionsError, InvalidTopicError, StorageRootError, TopicAlreadyExistsError,
                     UnknownTopicError)
from .filenames import DELETE_DIR_SUFFIX, partition_dir_name

MAX_TOPIC_NAME_LENGTH = 249  # Kafka's Topic.MAX_NAME_LENGTH
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
DEFAULT_ROOT = "./data"
ROOT_ENV = "TOPICLAKE_ROOT"


def validate_topic_name(name: str) -> str:
    """Kafka's Topic.validate: 1..249 chars of [a-zA-Z0-9._-], not '.' or '..'. Returns the name."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name[:40]}... ({len(name)} characters)")
    if not _LEGAL_TOPIC.fullmatch(name) or not name.isascii():
        raise InvalidTopicError(
            f"topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'")
    return name


def new_base64_uuid() -> str:
    """Kafka's Uuid.randomUuid().toString(): URL-safe base64 of 16 random bytes, no padding
    (22 chars); like Kafka, never one that starts with '-' (it would look like a CLI flag)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")
        if not text.startswith("-"):
            return text


def local_root(root: str | os.PathLike) -> Path:
    """The directory a root names (a path or file:///path). A URL root is refused in one line:
    object-store roots (s3://...) are served by no command yet, and as a path `s3://b/r` would
    silently become a local folder named `s3:`."""
    if not is_url(root):
        return Path(root)
    try:
        parsed = parse_root(root, env={})  # the bucket and prefix only: what to refuse, never the keys
    except RootError as exc:
        raise StorageRootError(str(exc)) from None
    if isinstance(parsed, LocalRoot):
        return parsed.path
    raise StorageRootError(f"object-store roots ({parsed}) are not served by this command yet: "
                           "give a directory as the storage root")


@dataclass(frozen=True, slots=True)
class StorageLayout:
    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))  # accept str too

    @classmethod
    def from_env(cls, root: str | os.PathLike | None = None) -> "StorageLayout":
        """An explicit root, else $TOPICLAKE_ROOT, else ./data (a directory: see local_root)."""
        return cls(local_root(root if root is not None else os.environ.get(ROOT_ENV, DEFAULT_ROOT)))

    @property
    def cluster_dir(self) -> Path:
        return self.root / "cluster"

    @property
    def cluster_meta_file(self) -> Path:
        return self.cluster_dir / "meta.json"

    @property
    def brokers_dir(self) -> Path:
        return self.cluster_dir / "brokers"

    def broker_file(self, broker_id: int) -> Path:
        return self.brokers_dir / f"{int(broker_id)}.json"

    @property
    def producer_id_blocks_dir(self) -> Path:
        return self.cluster_dir / "producer-id-blocks"

    @property
    def broker_configs_file(self) -> Path:
        return self.cluster_dir / "broker-configs.json"

    @property
    def topics_dir(self) -> Path:
        return self.root / "topics"

    @property
    def root_level_dirs(self) -> tuple[Path, ...]:
        """Where the root's own small files are (topics, configs, registrations, producer ids),
        each written by `atomic_write`; the partitions' directories are not among them."""
        return (self.root, self.topics_dir, self.cluster_dir, self.brokers_dir, self.producer_id_blocks_dir)

    @property
    def logs_dir(self) -> Path:
        return self.root / "log"

    @property
    def tables_dir(self) -> Path:
        return self.root / "tables"

    def topic_file(self, topic: str) -> Path:
        return self.topics_dir / f"{validate_topic_name(topic)}.json"

    def log_dir(self, topic: str, partition: int) -> Path:
        if int(partition) < 0:
            raise InvalidPartitionsError(f"partition {partition} of {topic!r} is negative")
        return self.logs_dir / partition_dir_name(validate_topic_name(topic), int(partition))

    def table_dir(self, name: str) -> Path:
        return self.tables_dir / validate_topic_name(name)

    def cluster_id(self) -> str:
        """The cluster id, created on first use (every process agrees: create-if-absent)."""
        meta = {"version": 0, "cluster_id": new_base64_uuid()}
        create_exclusive(self.cluster_meta_file, json.dumps(meta).encode())
        return json.loads(self.cluster_meta_file.read_text())["cluster_id"]

    def ensure_writable(self) -> None:
        """Create the root if it is missing and prove this process can write in it (a file is
        created and removed), or raise StorageRootError saying why it cannot be used."""
        if self.root.exists() and not self.root.is_dir():
            raise StorageRootError(f"storage root {self.root} is not a directory")
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageRootError(f"cannot create storage root {self.root}: {exc.strerror}") from exc
        try:
            fd, probe = tempfile.mkstemp(prefix=".write-check-", dir=self.root)
            os.close(fd)
            os.unlink(probe)
        except OSError as exc:
            raise StorageRootError(f"storage root {self.root} is not writable: {exc.strerror}") from exc


@dataclass(frozen=True, slots=True)
class TopicMeta:
    name: str
    partitions: int
    config: Mapping[str, str] = field(default_factory=dict)  # overrides only, Kafka names
    topic_id: str = ""
    # The cluster-wide dynamic defaults (topic names), under the overrides; not part of the file.
    defaults: Mapping[str, str] = field(default_factory=dict, compare=False)

    @property
    def log_config(self) -> LogConfig:
        return LogConfig.from_properties({**self.defaults, **self.config})

    def to_json(self) -> bytes:
        return json.dumps({"version": 0, "name": self.name, "topic_id": self.topic_id,
                           "partitions": self.partitions, "config": dict(self.config)},
                          indent=2, sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes, *, source: str) -> "TopicMeta":
        try:
            obj = json.loads(data)
            return cls(obj["name"], int(obj["partitions"]), dict(obj.get("config", {})), obj["topic_id"])
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidTopicError(f"{source}: unreadable topic file ({exc})") from None


def _normalize_config(config: Mapping[str, Any] | None) -> dict[str, str]:
    """Validate (InvalidConfigError) and keep overrides as Kafka-formatted strings."""
    config = dict(config or {})
    typed = LogConfig.from_properties(config)
    formatted = typed.to_properties()
    return {name: formatted[name] for name in sorted(config)}


CLUSTER_DEFAULT = ""  # the broker-config resource name of the cluster-wide default (Kafka's)


def topic_defaults(broker_configs: Mapping[str, str]) -> dict[str, str]:
    """The topic configs a set of broker properties sets, by topic name (log.retention.ms ->
    retention.ms, ...)."""
    return {topic_key: value for key, value in broker_configs.items()
            if (topic_key := LogConfig.topic_config_of(key))}


class TopicRegistry:
    """Topics as JSON files under <root>/topics; every change is atomic, and read-modify-write
    changes hold an flock on <root>/topics/.lock so two processes cannot lose an update. A
    topic's effective config is its overrides over the cluster-wide dynamic defaults."""

    def __init__(self, layout: StorageLayout):
        self.layout = layout
        self.broker_configs = ConfigStore(layout.broker_configs_file)

    def defaults(self) -> dict[str, str]:
        """The cluster-wide dynamic topic defaults (topic names)."""
        return topic_defaults(self.broker_configs.get(CLUSTER_DEFAULT))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.layout.topics_dir.mkdir(parents=True, exist_ok=True)
        with open(self.layout.topics_dir / ".lock", "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def create(self, name: str, partitions: int, config: Mapping[str, Any] | None = None) -> TopicMeta:
        path = self.layout.topic_file(name)
        if isinstance(partitions, bool) or int(partitions) < 1:
            raise InvalidPartitionsError(f"topic {name!r}: number of partitions must be at least 1, got {partitions}")
        meta = TopicMeta(name, int(partitions), _normalize_config(config), new_base64_uuid(), self.defaults())
        meta.log_config  # noqa: B018 - the overrides over the cluster defaults must make a valid config
        if not create_exclusive(path, meta.to_json()):
            # Kafka's words (its clients show them); no server path goes over the wire
            raise TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        return meta

    def get(self, name: str) -> TopicMeta:
        path = self.layout.topic_file(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise UnknownTopicError(f"unknown topic {name!r} (no {path})") from None
        return dataclasses.replace(TopicMeta.from_json(data, source=str(path)), defaults=self.defaults())

    def exists(self, name: str) -> bool:
        return self.layout.topic_file(name).exists()

    def list(self) -> list[TopicMeta]:
        if not self.layout.topics_dir.is_dir():
            return []
        out = []
        for path in sorted(self.layout.topics_dir.glob("*.json")):
            try:
                out.append(self.get(path.stem))
            except (UnknownTopicError, InvalidTopicError):
                continue  # deleted meanwhile, or a stray file with an illegal name
        return out

    def alter_config(self, name: str, updates: Mapping[str, Any | None], *, replace: bool = False) -> TopicMeta:
        """Set overrides (a None value removes one); with replace, `updates` is the whole set."""
        with self._locked():
            meta = self.get(name)
            config = {} if replace else dict(meta.config)
            for key, value in updates.items():
                if value is None:
                    config.pop(key, None)
                else:
                    config[key] = value
            new = TopicMeta(meta.name, meta.partitions, _normalize_config(config), meta.topic_id, meta.defaults)
            new.log_config  # noqa: B018 - valid over the cluster defaults too
            atomic_write(self.layout.topic_file(name), new.to_json())
            return new

    def add_partitions(self, name: str, total: int) -> TopicMeta:
        with self._locked():
            meta = self.get(name)
            if int(total) <= meta.partitions:
                raise InvalidPartitionsError(
                    f"topic {name!r} currently has {meta.partitions} partitions, "
                    f"{total} would not increase the partition count")
            new = TopicMeta(meta.name, int(total), meta.config, meta.topic_id, meta.defaults)
            atomic_write(self.layout.topic_file(name), new.to_json())
            return new

    def delete(self, name: str, *, remove_logs: bool = True) -> TopicMeta:
        """Unregister the topic, then remove its partition directories. Each directory is first
        renamed `<dir>.<id>-delete` (Kafka's marker), so a crash leaves no half-deleted log
        under a live name; leftovers can be removed with `purge_deleted_logs`."""
        with self._locked():
            meta = self.get(name)
            self.layout.topic_file(name).unlink()
        if remove_logs:
            for partition in range(meta.partitions):
                directory = self.layout.log_dir(name, partition)
                if directory.exists():
                    doomed = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
                    os.rename(directory, doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
        return meta

    def purge_deleted_logs(self) -> int:
        count = 0
        if self.layout.logs_dir.is_dir():
            for directory in self.layout.logs_dir.glob(f"*{DELETE_DIR_SUFFIX}"):
                shutil.rmtree(directory, ignore_errors=True)
                count += 1
        return count
