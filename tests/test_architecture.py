"""The dependency rules of docs/DESIGN.md (pyproject.toml's import-linter contracts), checked on every test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    linter = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(linter), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 10 kept, 0 broken" in result.stdout
