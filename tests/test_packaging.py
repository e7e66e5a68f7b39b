"""The wheel, installed as a user installs it (not editable): it builds without packaging warnings,
and the installed copy runs the CLI and carries every module, data file and native kernel of lib/."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BUILD_OUTPUT = ("__pycache__", "*.pyc", "*.so", "*.pyd", "*.egg-info")
NATIVE = ("topiclake.segments._native._decode", "topiclake.segments._native._compact",
          "topiclake.lake.typed._native._avro")

# Run by the installed copy's Python: where everything it imports and carries lives.
_PROBE = """
import importlib, importlib.metadata, json, sys
from pathlib import Path
import topiclake
package = Path(topiclake.__file__).parent
print(json.dumps({
    "package": str(package),
    "files": sorted(str(p.relative_to(package)) for p in package.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".so", ".pyd")),
    "native": {name: importlib.import_module(name).__file__ for name in sys.argv[1:]},
    "version": topiclake.__version__,
    "metadata_version": importlib.metadata.version("topiclake"),
}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; the main venv's packages serve as its dependencies."""
    tmp = tmp_path_factory.mktemp("packaging")
    source = tmp / "source"  # a clean copy: an in-tree build would reuse (and leave) build/
    shutil.copytree(REPO / "lib", source / "lib", ignore=shutil.ignore_patterns(*BUILD_OUTPUT))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    output = build.stdout + build.stderr
    assert "BuildBackendWarning" not in output and "SetuptoolsDeprecationWarning" not in output, output[-6000:]
    [wheel] = (tmp / "dist").glob("topiclake-*.whl")

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    # The dependencies: the main venv's site-packages, AFTER the fresh one (a .pth line appends it),
    # and without running the main venv's own .pth files: its editable topiclake stays out of reach.
    [site] = {Path(p) for p in subprocess.run([str(python), "-c", "import site; print(*site.getsitepackages())"],
                                               capture_output=True, text=True, check=True).stdout.split()}
    main_site = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "main-venv-dependencies.pth").write_text("\n".join(sorted(main_site)) + "\n")
    return venv


def _probe(venv: Path) -> dict:
    done = subprocess.run([str(venv / "bin" / "python"), "-c", _PROBE, *NATIVE], capture_output=True, text=True,
                          timeout=120, cwd=venv, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_installed_wheel_carries_every_module_and_data_file(installed):
    probe = _probe(installed)
    assert Path(probe["package"]).is_relative_to(installed), probe["package"]  # the wheel's copy, not lib/
    source = {str(p.relative_to(REPO / "lib")) for p in (REPO / "lib").rglob("*")
              if p.is_file() and not any(p.match(pattern) for pattern in (*BUILD_OUTPUT, "*.c", "*.h"))
              and "__pycache__" not in p.parts}  # the kernels' C sources and headers are built, not shipped
    assert source - set(probe["files"]) == set()
    data = {name for name in source if not name.endswith(".py")}
    assert {"console/static/console.css", "console/templates/base.html"} <= data
    assert {Path(name).name for name in data} >= {"log4j2.properties", "pom.xml"}
    for name, path in probe["native"].items():
        assert Path(path).is_relative_to(installed), (name, path)


def test_the_installed_version_is_pyproject_s(installed):
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    probe = _probe(installed)
    assert probe["version"] == probe["metadata_version"] == declared


def test_the_installed_cli_runs(installed):
    done = subprocess.run([str(installed / "bin" / "topiclake"), "--help"], capture_output=True, text=True,
                          timeout=120, cwd=installed, env={"PATH": "/usr/bin:/bin", "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    assert "Usage: topiclake" in done.stdout and "broker" in done.stdout
