"""conf/topiclake.toml: the settings file shared by the broker, the CLI and the jobs.

Only reading lives here (tomllib, stdlib); each area looks up its own table (`[broker]`,
`[storage]`, ...). The storage root resolves in this order: an explicit value (a command-line
flag), $TOPICLAKE_ROOT, `[storage] root` in the file, ./data. A relative root in the file is
relative to the directory the command runs in, like Kafka's log.dirs. It is a directory (or
file:///path): an object-store URL (s3://...) is refused in one line until commands serve one.
"""

from __future__ import annotations

import os
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Mapping

from .errors import InvalidConfigError, StorageRootError
from .storage import DEFAULT_ROOT, ROOT_ENV, local_root

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
    check_types(cls, name, values)
    return cls(**values)


def check_types(cls, name: str, values: Mapping[str, Any]) -> None:
    """Every value of section [`name`] has the type of the dataclass field it sets (a quoted
    number or a string where a number belongs is an InvalidConfigError naming the key, not a
    TypeError deep in the broker). Fields of other types (nested settings) are not checked."""
    hints = typing.get_type_hints(cls)
    for key, value in values.items():
        allowed = _toml_types(hints.get(key))
        if allowed and not _is_one_of(value, allowed):
            wanted = " or ".join(_TYPE_NAMES[t] for t in allowed if not (t is int and float in allowed))
            raise InvalidConfigError(f"[{name}] {key} must be {wanted}, not {value!r}")


_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _toml_types(hint) -> tuple[type, ...]:
    """The TOML value types a field's annotation accepts (an int is a valid float; None cannot
    be written in TOML); () for annotations that are not plain settings."""
    if hint in (bool, int, str):
        return (hint,)
    if hint is float:
        return (float, int)
    if hint is Path:
        return (str,)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) if arg is not type(None) for t in _toml_types(arg))
    return ()


def _is_one_of(value: Any, allowed: tuple[type, ...]) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, never to a settings file
        return bool in allowed
    return isinstance(value, allowed)


def storage_root(settings: Mapping[str, Any], explicit: str | os.PathLike | None = None) -> Path:
    """The storage root directory; a URL root (s3://...) is a StorageRootError (see local_root)."""
    return local_root(_root_text(settings, explicit))


def storage_location(settings: Mapping[str, Any], explicit: str | os.PathLike | None = None):
    """The root for a command that serves object-store roots too: a topiclake.store LocalRoot, or
    an S3Root whose server and keys come from [storage.s3] and the AWS environment."""
    from topiclake.store.errors import RootError
    from topiclake.store.root import parse_root

    s3_settings = section(settings, "storage").get("s3", {})
    if not isinstance(s3_settings, dict):
        raise InvalidConfigError("[storage.s3] in the config file must be a table")
    try:
        return parse_root(_root_text(settings, explicit), s3_settings)
    except RootError as exc:
        raise StorageRootError(str(exc)) from None


def _root_text(settings: Mapping[str, Any], explicit: str | os.PathLike | None) -> str | os.PathLike:
    """The root as given: the flag, else $TOPICLAKE_ROOT, else [storage] root."""
    if explicit is not None:
        return explicit
    if os.environ.get(ROOT_ENV):
        return os.environ[ROOT_ENV]
    root = section(settings, "storage").get("root", DEFAULT_ROOT)
    if not isinstance(root, str):
        raise InvalidConfigError(f"[storage] root must be a string, not {root!r}")
    return root
