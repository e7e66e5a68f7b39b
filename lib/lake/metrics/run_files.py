"""Where a storage root keeps the lake's run records (run_metrics.py): `metrics/` of a directory,
or the same keys under an object-store root's prefix. Both take the same four calls:

    read(name)                  the file's text, None when there is none
    replace(name, data)         the whole file, atomically (a reader sees the old or the new one)
    append(name, line, limit)   one line added; past `limit` bytes the file becomes `<name>.1` first
    names(suffix)               the files ending in `suffix`, by name (no temporary ones)

A bucket has no append: a line is added by a read-modify-write of the whole object, put with
If-Match on the ETag read (If-None-Match when there was none), so concurrent runs never lose each
other's lines; a lost race reads again.
"""

from __future__ import annotations

import os
from pathlib import Path

from topiclake.segments.atomic import atomic_write

METRICS_DIR = "metrics"
_APPEND_ATTEMPTS = 50  # lost races of one append before it gives up (a warning: metrics never fail a run)


class DirectoryRunFiles:
    def __init__(self, root: Path):
        self.directory = Path(root) / METRICS_DIR

    def __str__(self) -> str:
        return str(self.directory)

    def read(self, name: str) -> str | None:
        try:
            return (self.directory / name).read_text()
        except OSError:  # none, or removed between a listing and the read
            return None

    def replace(self, name: str, data: bytes) -> None:
        atomic_write(self.directory / name, data)

    def append(self, name: str, line: bytes, limit: int) -> None:
        path = self.directory / name
        try:
            if path.stat().st_size + len(line) > limit:
                os.replace(path, path.with_name(name + ".1"))
        except FileNotFoundError:
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        # One write() of an O_APPEND file: runs of concurrent jobs never interleave inside a line.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def names(self, suffix: str) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.glob("*" + suffix) if not p.name.startswith("."))


class BucketRunFiles:
    def __init__(self, root):
        from topiclake.store.objects import ObjectStore

        self.root = root
        self.store = ObjectStore(root)

    def __str__(self) -> str:
        return self.root.uri(METRICS_DIR)

    def read(self, name: str) -> str | None:
        from topiclake.store.errors import ObjectNotFound

        try:
            return self.store.get(f"{METRICS_DIR}/{name}").decode()
        except ObjectNotFound:
            return None

    def replace(self, name: str, data: bytes) -> None:
        self.store.put(f"{METRICS_DIR}/{name}", data)  # a whole object: atomic for its readers

    def append(self, name: str, line: bytes, limit: int) -> None:
        from topiclake.store.errors import ObjectExists, ObjectNotFound, PreconditionFailed
        from topiclake.store.objects import CREATE, IfMatch

        key = f"{METRICS_DIR}/{name}"
        for _ in range(_APPEND_ATTEMPTS):
            try:
                old, etag = self.store.get_with_etag(key)
            except ObjectNotFound:
                old, etag = b"", None
            if old and len(old) + len(line) > limit:
                self.store.put(f"{key}.1", old)  # the generation kept; a lost race below only rewrites it
                old = b""
            try:
                self.store.put(key, old + line, mode=CREATE if etag is None else IfMatch(etag))
                return
            except (ObjectExists, PreconditionFailed):  # another run appended meanwhile
                continue
        raise RuntimeError(f"{key}: lost {_APPEND_ATTEMPTS} races to other writers")

    def names(self, suffix: str) -> list[str]:
        names = (info.key.rsplit("/", 1)[-1] for info in self.store.list(METRICS_DIR))
        return sorted(n for n in names if n.endswith(suffix) and not n.startswith("."))


def run_files(root) -> DirectoryRunFiles | BucketRunFiles:
    """The run records of `root`: a directory (a Path), or an object-store root (an S3Root)."""
    if isinstance(root, (str, Path)):
        return DirectoryRunFiles(Path(root))
    return BucketRunFiles(root)
