"""conf/topiclake.toml: the settings file shared by the broker, the CLI and the jobs.

Only reading lives here (tomllib, stdlib); each area looks up its own table (`[broker]`,
`[storage]`, ...). The storage root resolves in this order: an explicit value (a command-line
flag), $TOPICLAKE_ROOT, `[storage] root` in the file, ./data. A relative root in the file is
relative to the directory the command runs in, like Kafka's log.dirs.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Mapping

from .errors import InvalidConfigError
from .storage import DEFAULT_ROOT, ROOT_ENV

DEFAULT_CONFIG_PATH = Path("conf/topiclake.toml")
CONFIG_ENV = "TOPICLAKE_CONFIG"


def load_settings(path: str | os.PathLike | None = None) -> dict[str, Any]:
    """The parsed TOML file. An explicit path must exist; the default path may be absent
    (then every setting has its default)."""
    explicit = path is not None or CONFIG_ENV in os.environ
    path = Path(path if path is not None else os.environ.get(CONFIG_ENV, DEFAULT_CONFIG_PATH))
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        if explicit:
            raise InvalidConfigError(f"config file {path} does not exist") from None
        return {}
    except tomllib.TOMLDecodeError as exc:
        raise InvalidConfigError(f"{path}: {exc}") from None


def section(settings: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = settings.get(name, {})
    if not isinstance(value, dict):
        raise InvalidConfigError(f"[{name}] in the config file must be a table")
    return dict(value)


def section_dataclass(cls, name: str, values: Mapping[str, Any]):
    """A settings dataclass from its TOML section; an unknown key is an error, not a silent typo."""
    import dataclasses

    unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise InvalidConfigError(f"unknown [{name}] settings: {', '.join(sorted(unknown))}")
    return cls(**values)


def storage_root(settings: Mapping[str, Any], explicit: str | os.PathLike | None = None) -> Path:
    if explicit is not None:
        return Path(explicit)
    if os.environ.get(ROOT_ENV):
        return Path(os.environ[ROOT_ENV])
    return Path(section(settings, "storage").get("root", DEFAULT_ROOT))
