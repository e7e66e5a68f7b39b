"""Compatibility levels, as Confluent applies them to a new schema and a subject's live versions.

BACKWARD: the new schema reads data written with the latest version; FORWARD: the latest
version reads data written with the new one; FULL: both. The _TRANSITIVE levels check every
live version instead of the latest only. NONE checks nothing.
"""

from __future__ import annotations

from .errors import invalid_compatibility
from .formats.base import ParsedSchema

LEVELS = ("NONE", "BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")


def validate_level(level) -> str:
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise invalid_compatibility(level)
    return level.upper()


def incompatibilities(level: str, new: ParsedSchema, previous: list[tuple[int, ParsedSchema]]) -> list[str]:
    """Why `new` may not follow `previous` ((version, schema), oldest first) at `level`: [] if it may.
    The first incompatible version (newest first) is reported, with Confluent's trailing details."""
    if level == "NONE" or not previous:
        return []
    targets = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    base = level.removesuffix("_TRANSITIVE")
    for version, old in reversed(targets):
        messages: list[str] = []
        if base in ("BACKWARD", "FULL"):
            messages += new.backward_errors(old, ("new", "old"))
        if base in ("FORWARD", "FULL"):
            messages += old.backward_errors(new, ("old", "new"))
        if messages:
            return [*messages, f"{{oldSchemaVersion: {version}}}", f"{{oldSchema: '{old.canonical}'}}",
                    f"{{compatibility: '{level}'}}"]
    return []
