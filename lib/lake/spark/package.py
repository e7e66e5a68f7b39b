"""Build the zip that ships topiclake to Spark executors with --py-files.

    python -m topiclake.lake.spark.package [--out dist]   ->  dist/topiclake-<version>-py.zip
    spark-submit --py-files dist/topiclake-<version>-py.zip jobs/ingest.py --topic ...

Python cannot import C extensions from a zip, so executors that get the package this way
decode with the pure-Python twin of the native kernel (topiclake.segments.arrow falls back on
its own): correct, slower. Executors with topiclake installed (pip install of the wheel that
`pip wheel --no-deps -w dist .` builds) use the kernel; do not also pass the zip to them, as
--py-files comes first on sys.path. The executors need pyarrow, pandas and the codecs either way.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

_SKIP_SUFFIXES = (".pyc", ".so", ".c", ".pyd")


def build_pyfiles(out_dir: str | Path = "dist") -> Path:
    import topiclake

    package = Path(topiclake.__file__).resolve().parent
    try:
        ver = version("topiclake")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        ver = "0"
    out = Path(out_dir) / f"topiclake-{ver}-py.zip"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(package.rglob("*")):
            if path.is_dir() or "__pycache__" in path.parts or path.suffix in _SKIP_SUFFIXES:
                continue
            zf.write(path, Path("topiclake") / path.relative_to(package))
    tmp.replace(out)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m topiclake.lake.spark.package",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="dist", help="output directory (default dist/)")
    print(build_pyfiles(parser.parse_args(argv).out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
