"""Dynamic configs in shared storage: named sets of `key -> value` strings in one JSON file.

Kafka keeps dynamic configs (cluster-wide broker defaults, group configs, client quotas) as
ConfigRecords in its metadata log; here each kind is one small JSON file under <root>/cluster,
changed read-modify-write under an flock and written atomically, so two processes never lose
an update and a reader never sees a torn file. Reads are cached by the file's (mtime, size), so
a lookup on a hot path (a heartbeat, a topic open) costs one stat.

    {"version": 0, "configs": {"<resource name>": {"<key>": "<value>", ...}, ...}}
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Mapping

from .atomic import atomic_write
from .errors import InvalidConfigError

Configs = dict[str, dict[str, str]]


class ConfigStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._cache: tuple[tuple[int, int], Configs] | None = None
        self._guard = threading.Lock()

    def all(self) -> Configs:
        """Every named set (a copy)."""
        return {name: dict(values) for name, values in self._read().items()}

    def snapshot(self) -> Configs:
        """Every named set as last read, not copied (do not modify it): the same object until
        the file changes, so a caller can memoise what it derives from it."""
        return self._read()

    def get(self, name: str) -> dict[str, str]:
        return dict(self._read().get(name, {}))

    def update(self, name: str, updates: Mapping[str, str | None], *, replace: bool = False,
               validate: Callable[[dict[str, str]], None] | None = None) -> dict[str, str]:
        """Set keys of one named set (a None value removes a key; with replace, `updates` is the
        whole set); `validate(new set)` may refuse it by raising. Returns the new set."""
        with self._locked():
            configs = self._load()
            values = {} if replace else dict(configs.get(name, {}))
            for key, value in updates.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = str(value)
            if validate is not None:
                validate(values)
            if values:
                configs[name] = values
            else:
                configs.pop(name, None)
            self._write(configs)
            return values

    def create(self, initial: Configs) -> bool:
        """Write `initial` if the file does not exist yet (False: it existed, nothing changed)."""
        with self._locked():
            if self.path.exists():
                return False
            self._write(initial)
            return True

    # -- files
    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_name(f".{self.path.name}.lock"), "a+b") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> Configs:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size)
        with self._guard:
            if self._cache is None or self._cache[0] != stamp:
                self._cache = (stamp, self._load())
            return self._cache[1]

    def _load(self) -> Configs:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            configs = json.loads(data)["configs"]
            return {str(name): {str(k): str(v) for k, v in values.items()} for name, values in configs.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InvalidConfigError(f"{self.path}: unreadable config file ({exc})") from None

    def _write(self, configs: Configs) -> None:
        atomic_write(self.path, json.dumps({"version": 0, "configs": configs}, indent=2, sort_keys=True).encode())
        with self._guard:
            self._cache = None
