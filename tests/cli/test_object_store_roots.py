"""Until a command serves object-store roots, `--data s3://...` (or $TOPICLAKE_ROOT, or [storage]
root) is refused in one line naming the URL, and nothing is created: before, `s3://b/r` became a
local folder named `s3:`. A URL no root can be is refused in one line by every command, those that
serve one too. `topiclake metrics` serves one (its tables' snapshot figures): tested on the real
server; so does the broker (tests/broker_bucket), and ingest, backfill, coverage, retain and compact
(tests/lake/test_ingest_bucket.py, test_retain_bucket.py and test_compact_bucket.py), and data-docs
(tests/console/test_console_bucket.py). Each case runs the real command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

NOT_SERVED = "error: object-store roots (s3://bars/root) are not served by this command yet: " \
             "give a directory as the storage root"


def topiclake(*args: str, cwd, env_root: str | None = None, aws: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("TOPICLAKE_ROOT", "TOPICLAKE_CONFIG")}
    env.update(aws or {})
    if env_root is not None:
        env["TOPICLAKE_ROOT"] = env_root
    return subprocess.run([sys.executable, "-m", "topiclake.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=env)


def assert_refused(result: subprocess.CompletedProcess, line: str, cwd) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [line]
    # (.hypothesis: the cache that importing kio's hypothesis strategies leaves in any working directory)
    assert [p.name for p in cwd.iterdir() if p.name != ".hypothesis"] == [], "nothing created (no `s3:` folder)"


def test_data_url_is_refused(tmp_path):
    assert_refused(topiclake("rebuild", "t", "--data", "s3://bars/root", cwd=tmp_path), NOT_SERVED, tmp_path)
def test_a_broker_on_a_bucket_that_does_not_exist_says_so_in_one_line(tmp_path, s3_server):
    # The broker serves bucket roots (tests/broker_bucket); a missing bucket is one line, exit 1.
    result = topiclake("broker", "start", "--port", "0", "--data", "s3://no-such-bucket/root", cwd=tmp_path,
                       aws=s3_server.env())
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "s3://no-such-bucket/root/cluster/owner.json" in result.stderr and "bucket does not exist" in result.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name != ".hypothesis"] == ["data-cache"]  # its default cache dir


@pytest.mark.parametrize("command", [("broker", "start", "--port", "0"), ("ingest", "--topic", "t")],
                         ids=["broker", "ingest"])
def test_the_issue_example_is_refused(tmp_path, command):
    # `b` is too short for a bucket name: refused for that, in one line, before anything else
    result = topiclake(*command, "--data", "s3://b/r", cwd=tmp_path)
    assert_refused(result, "error: s3://b/r: 'b' is not a valid bucket name (3-63 characters of a-z, 0-9, "
                           "'.' and '-', starting and ending with a letter or digit)", tmp_path)


def test_root_from_the_environment_and_the_settings_file(tmp_path):
    assert_refused(topiclake("rebuild", "t", cwd=tmp_path, env_root="s3://bars/root"), NOT_SERVED, tmp_path)
    settings = tmp_path.parent / f"{tmp_path.name}.toml"
    settings.write_text('[storage]\nroot = "s3://bars/root"\n')
    assert_refused(topiclake("rebuild", "t", "--config", str(settings), cwd=tmp_path), NOT_SERVED, tmp_path)


@pytest.mark.parametrize("command", [("users", "list")])
def test_other_commands_taking_a_root(tmp_path, command):
    assert_refused(topiclake(*command, "--data", "s3://bars/root", cwd=tmp_path), NOT_SERVED, tmp_path)


def test_other_schemes_say_what_is_supported(tmp_path):
    result = topiclake("broker", "start", "--port", "0", "--data", "gs://bars/root", cwd=tmp_path)
    assert_refused(result, "error: gs:// roots are not supported (gs://bars/root): use a directory, "
                           "file:///path, s3://bucket[/prefix] or s3a://bucket[/prefix]", tmp_path)


def test_metrics_of_the_tables_on_a_bucket(tmp_path, s3_root):
    import pyarrow as pa
    from deltalake import write_deltalake

    root = s3_root.root
    write_deltalake(root.uri("tables", "orders"), pa.table({"item": ["a", "b", "c"]}),
                    storage_options=root.delta_storage_options())
    write_deltalake(root.uri("tables", "orders"), pa.table({"item": ["d"]}), mode="append",
                    storage_options=root.delta_storage_options())
    result = topiclake("metrics", "--data", str(root), cwd=tmp_path, aws=s3_root.env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for expected in ('topiclake_table_up{table="orders"} 1.0', 'topiclake_table_version{table="orders"} 1.0',
                     'topiclake_table_files{table="orders"} 2.0', 'topiclake_table_rows{table="orders"} 4.0'):
        assert expected in lines, result.stdout
    assert [p.name for p in tmp_path.iterdir() if p.name != ".hypothesis"] == [], "nothing created locally"


def test_data_docs_on_a_bucket_without_results_says_so_in_one_line(tmp_path, s3_root):
    # (with results it builds the site in the bucket: tests/console/test_console_bucket.py)
    result = topiclake("data-docs", "--data", str(s3_root.root), cwd=tmp_path, aws=s3_root.env)
    assert_refused(result, f"error: no validation results under {s3_root.root.uri('quality', 'results')}: "
                           "ingest or backfill a table first", tmp_path)
