"""The README's Airflow steps, run as written: the bash block under "Running from Airflow" runs in
a scratch directory laid out like the project (dags/ and .venv/ linked, a data/ root holding a
tiny topic), with nothing else in the environment telling Airflow or Spark where things are. The
install lines (step 1) are what bin/_env.sh already did: the test checks their result instead of
reinstalling. Then the ingest DAG's run must have written the table."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.lake import TopicWriter, read_table

pytest.importorskip("airflow.providers.apache.spark", reason="the airflow extra is not installed (bin/_env.sh)")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def readme_airflow_steps() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Running from Airflow"):]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_readme_airflow_steps_run_the_ingest_dag(tmp_path):
    steps = readme_airflow_steps()
    installs = [s for s in steps if s.startswith(".venv/bin/pip install")]
    assert len(installs) == 2 and "'.[airflow]'" in installs[0], installs
    assert installs[1].endswith("--no-deps apache-airflow-providers-apache-spark==6.3.4"), installs
    from importlib.metadata import version

    assert version("apache-airflow") and version("apache-airflow-providers-apache-spark") == "6.3.4"
    pinned = re.search(r'"pyspark\[[a-z,]*\]==([\d.]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert version("pyspark") == pinned  # the provider's pyspark-client did not replace it
    commands = [s for s in steps if s not in installs]
    assert [c.split()[0] for c in commands if c.startswith(".venv/bin/airflow")] == [".venv/bin/airflow"] * 2
    assert "db migrate" in commands[-2] and "dags test topiclake_ingest" in commands[-1]

    (tmp_path / "dags").symlink_to(REPO / "dags")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    TopicWriter(tmp_path / "data", "demo.events", partitions=2).produce(1, [b"a", b"b"])
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "SPARK_LOCAL_IP": "127.0.0.1"}
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", "\n".join(commands)], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout[-4000:], result.stderr[-4000:])
    table, data = read_table(tmp_path / "data" / "tables" / "demo.events")
    assert sorted(zip(data["partition"].to_pylist(), data["offset"].to_pylist())) == [(1, 0), (1, 1)]
    assert table.transaction_version("topiclake-ingest-demo.events:demo.events:1") == 2
    assert (tmp_path / ".airflow").is_dir() and not (REPO / ".airflow").exists()  # AIRFLOW_HOME as the README set it
