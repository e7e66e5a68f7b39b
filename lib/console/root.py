"""How the console shows sizes, and the static files it may serve (what it reads from the
storage root: storage.py)."""

from __future__ import annotations

from pathlib import Path


def human_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def safe_join(base: Path, relative: str) -> Path | None:
    """`base/relative` when it stays inside `base` (static files), else None."""
    target = (base / relative).resolve()
    return target if target.is_relative_to(base.resolve()) else None
