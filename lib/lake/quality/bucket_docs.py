"""Data Docs on an object-store root: the site a directory root has under <root>/quality, built
from the validation results stored in the bucket and put back beside them.

great-expectations' SiteBuilder writes to a filesystem, so the results (`quality/results/...`, the
keys a directory root has) are fetched into a scratch directory, the site is built there exactly
as on a directory (`gate.build_data_docs`), and every file of it but the results is put under
`quality/` (unconditional PUTs: the site is derived, rebuilt whole from the results each time,
and a reader of a page sees it whole). `site_files` gives the console the site's objects.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from .gate import build_data_docs, quality_dir

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
    from topiclake.store.objects import ObjectStore

    store = ObjectStore(root)
    keys = result_keys(store)
    if not keys:
        return 0, None
    with tempfile.TemporaryDirectory(prefix="topiclake-data-docs-") as scratch:
        local = Path(scratch)
        site = quality_dir(local)
        for key in keys:
            path = local.joinpath(*key.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(store.get(key))
        if build_data_docs(local) is None:
            return len(keys), None
        for path in sorted(site.rglob("*")):
            relative = path.relative_to(site)
            if path.is_file() and relative.parts[0] != RESULTS:
                store.put("/".join((QUALITY, *relative.parts)), path.read_bytes())
    return len(keys), root.uri(QUALITY, "index.html")
