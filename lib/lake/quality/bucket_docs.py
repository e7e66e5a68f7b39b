"""Data Docs on an object-store root: the site a directory root has under <root>/quality, built
from the validation results stored in the bucket and put back beside them.

great-expectations' SiteBuilder writes to a filesystem, so the results (`quality/results/...`, the
keys a directory root has) are fetched into a scratch directory, the site is built there exactly
as on a directory (`gate.build_data_docs`), and every file of it but the results is put under
`quality/` (unconditional PUTs: the site is derived, rebuilt whole from the results each time,
and a reader of a page sees it whole). `site_files` gives the console the site's objects.

A job run checks its tables inside `once_per_run`: gate.validate marks the reports whose page a
run asked for (--data-docs) or whose suite failed (not for a driver-side suite alone: the whole
site is rebuilt from every result), and the site is built once after all the checks.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from .gate import QualityError, QualityReport, build_data_docs, quality_dir

log = logging.getLogger(__name__)

QUALITY = "quality"
RESULTS = "results"


def result_keys(store) -> list[str]:
    """The stored validation results' keys (`quality/results/**.json`)."""
    return sorted(info.key for info in store.list(f"{QUALITY}/{RESULTS}") if info.key.endswith(".json"))


def site_files(store) -> list:
    """The Data Docs site's objects (ObjectInfo): everything under `quality/` but the results."""
    results = f"{QUALITY}/{RESULTS}/"
    return [info for info in store.list(QUALITY) if not info.key.startswith(results)]


def build_bucket_data_docs(root) -> tuple[int, str | None]:
    """(validations, the index's URL) after rebuilding the site of `root` (an S3Root) from its
    stored results; (0, None) when it holds none."""
    count, index, _ = _build(root)
    return count, index


@contextlib.contextmanager
def once_per_run(root, reports: Callable[[], list[QualityReport | None]]) -> Iterator[None]:
    """Around a job run's quality checks: then one build of a bucket's site if any of `reports()`
    asks for its page; a failed check's too, before its error (which names the page) is shown."""
    try:
        yield
    except QualityError as failure:
        try:
            publish(root, [*reports(), failure.report])
        except Exception as exc:  # noqa: BLE001 - the failed check is the error to report, the site is extra
            log.warning("the Data Docs site under %s was not built: %s", root.uri(QUALITY), exc)
        raise
    publish(root, reports())


def publish(root, reports: list[QualityReport | None]) -> None:
    """Rebuild the site when a report asks for its page (`site_due`, a bucket's only), and point
    each such report at its page's URI."""
    due = [(r, r.site_due) for r in reports if r is not None and r.site_due is not None]
    if not due:
        return
    _, _, written = _build(root)
    for report, key in due:
        *where, batch = key.parts  # the page's path in the site is the result's
        page = (QUALITY, "validations", *where, batch + ".html")
        report.path = root.uri(*page) if "/".join(page) in written else None
        report.site_due = None


def _build(root) -> tuple[int, str | None, set[str]]:
    """(validations, the index's URL, the keys put) of a rebuild of the site."""
    from topiclake.store.objects import ObjectStore

    store = ObjectStore(root)
    keys = result_keys(store)
    if not keys:
        return 0, None, set()
    written: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="topiclake-data-docs-") as scratch:
        local = Path(scratch)
        site = quality_dir(local)
        for key in keys:
            path = local.joinpath(*key.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(store.get(key))
        if build_data_docs(local) is None:
            return len(keys), None, written
        for path in sorted(site.rglob("*")):
            relative = path.relative_to(site)
            if path.is_file() and relative.parts[0] != RESULTS:
                key = "/".join((QUALITY, *relative.parts))
                store.put(key, path.read_bytes())
                written.add(key)
    return len(keys), root.uri(QUALITY, "index.html"), written
