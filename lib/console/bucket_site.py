"""The Data Docs site of an object-store root (`topiclake data-docs` puts it under `quality/` in
the bucket) mirrored into a local directory, so the console serves it as static files exactly as
a directory root's: fetched again when `quality/index.html` changed (its ETag, which every
rebuild changes), and looked at no more often than every CHECK_S."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
import time
from pathlib import Path

from .root import safe_join

INDEX = "quality/index.html"
CHECK_S = 5.0  # a rebuilt site shows within this; pages in between cost no request
KEPT_MIRRORS = 2  # the previous mirror stays: a response may still be sending one of its files


class SiteMirror:
    def __init__(self, store):
        self.store = store
        self._parent: Path | None = None
        self._mirrors: list[Path] = []
        self._etag: str | None = None
        self._checked: float | None = None
        self._lock = threading.Lock()

    def current(self) -> Path | None:
        """The local copy of the site, None while the bucket has none (blocking: call it off the loop)."""
        with self._lock:
            now = time.monotonic()
            if self._checked is not None and now - self._checked < CHECK_S:
                return self._current()
            self._checked = now
            info = self.store.head(INDEX)
            if info is None:
                self._etag = None
                return None
            if info.etag != self._etag or not self._mirrors:
                self._fetch()
                self._etag = info.etag
            return self._current()

    def _current(self) -> Path | None:
        return self._mirrors[-1] if self._mirrors and self._etag is not None else None

    def _fetch(self) -> None:
        from topiclake.lake.quality.bucket_docs import site_files

        if self._parent is None:
            self._parent = Path(tempfile.mkdtemp(prefix="topiclake-console-site-"))
            atexit.register(shutil.rmtree, self._parent, True)
        target = Path(tempfile.mkdtemp(dir=self._parent))
        for info in site_files(self.store):
            path = safe_join(target, "/".join(info.key.split("/")[1:]))  # the key less its "quality/"
            if path is None:
                continue  # a key with `..` in it would write outside the mirror: not part of a site
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(self.store.get(info.key))
        self._mirrors.append(target)
        while len(self._mirrors) > KEPT_MIRRORS:
            shutil.rmtree(self._mirrors.pop(0), ignore_errors=True)
