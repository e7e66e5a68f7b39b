"""`topiclake sql` / jobs/sql.py: statements in one Spark session, from the command line, a file,
a pipe, or an interactive shell on a terminal.

The shell keeps a history (readline, ~/.topiclake_sql_history), reads a statement over several
lines until a `;` ends it, prints each result with its time, and Ctrl-C while a query runs cancels
that query's Spark jobs (its job group) and returns to the prompt; Ctrl-C at the prompt clears
the line; Ctrl-D, `exit` or `quit` leaves.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from ..errors import UsageError, error_line
from .catalog import discover_names, open_catalog
from .query import QueryResult, execute, format_result, register_tables, split_statements, statement_complete

PROMPT, CONTINUATION = "topiclake> ", "        -> "
HISTORY_ENV = "TOPICLAKE_SQL_HISTORY"
QUIT = {"exit", "quit", r"\q"}
CANCEL_WAIT_S = 30.0


class QueryCancelled(Exception):
    """Ctrl-C cancelled the running statement's Spark jobs."""


@dataclass
class SqlSession:
    spark: Any
    tables: dict[str, str]
    fmt: str = "table"
    max_rows: int = 1000

    remote: str | None = None  # the standing SQL endpoint's URL, when the session is its client

    @classmethod
    def start(cls, root, *, master: str | None, conf: dict[str, str], fmt: str, max_rows: int) -> "SqlSession":
        """`root`: a directory (Path), or an object-store root (topiclake.store's S3Root), whose
        tables are read through s3a and whose new tables go under its tables/."""
        spark, discover = open_catalog(root, app_name="topiclake-sql", master=master, conf=conf)
        tables = discover()
        register_tables(spark, tables)
        return cls(spark, tables, fmt, max_rows)

    @classmethod
    def connect(cls, url: str, root, *, fmt: str, max_rows: int) -> "SqlSession":
        """A client of the standing SQL endpoint (topiclake.lake.sql.endpoint), which names the tables."""
        from .endpoint import connect

        return cls(connect(url, root), discover_names(root), fmt, max_rows, remote=url)

    # ------------------------------------------------------------------------------ batch

    def run_script(self, text: str) -> int:
        """Every statement in order; the first error stops the run (exit 1)."""
        statements = split_statements(text)
        if not statements:
            raise UsageError("no SQL statement given", hint='pass a query, e.g. "SHOW TABLES", or --file FILE')
        for statement in statements:
            self._print(execute(self.spark, statement, self.tables, max_rows=self.max_rows), timed=False)
        return 0

    def _print(self, result: QueryResult, *, timed: bool) -> None:
        if result.table.num_columns == 0:
            text = "OK"
        else:
            text = format_result(result.table, self.fmt, truncated=result.truncated)
        if timed:
            text += f"\n({result.seconds:.2f} s)" if self.fmt == "table" else ""
        print(text, flush=True)
        if result.truncated and self.fmt != "table":
            print(f"sql: only the first {self.max_rows} rows are shown; more were cut by --max-rows",
                  file=sys.stderr, flush=True)
        if timed and self.fmt != "table":
            print(f"({result.seconds:.2f} s)", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------------ shell

    def shell(self) -> int:
        history = _open_history()
        names = ", ".join(f"`{n}`" if "." in n else n for n in sorted(self.tables)) or "none yet"
        where = f" SQL server: {self.remote}" if self.remote else _spark_ui(self.spark)
        print(f"topiclake sql: Spark SQL over the tables ({names}). End statements with ';'. "
              "Ctrl-C cancels a running query; Ctrl-D or exit leaves." + where, flush=True)
        try:
            while True:
                statement = self._read_statement()
                if statement is None:
                    print(flush=True)
                    return 0
                if statement.strip().rstrip(";").strip().lower() in QUIT:
                    return 0
                for one in split_statements(statement):
                    try:
                        self._print(self._cancellable(one), timed=True)
                    except QueryCancelled:
                        print("query cancelled", flush=True)
                        break
                    except Exception as exc:  # noqa: BLE001 - the shell reports and goes on
                        print(f"error: {error_line(exc)}", flush=True)
                        break
        finally:
            history()

    def _read_statement(self) -> str | None:
        """Lines until one ends the statement with `;`; None at end of input."""
        lines: list[str] = []
        while True:
            try:
                line = input(CONTINUATION if lines else PROMPT)
            except EOFError:
                return None
            except KeyboardInterrupt:  # at the prompt: drop what was typed
                print("^C", flush=True)
                lines = []
                continue
            lines.append(line)
            text = "\n".join(lines)
            if statement_complete(text) or (len(lines) == 1 and line.strip().lower() in QUIT):
                _one_history_entry(lines)
                return text
            if not text.strip():
                lines = []

    def _cancellable(self, statement: str) -> QueryResult:
        """Run one statement in its own job group; SIGINT cancels the group, not the shell.
        A Ctrl-C that comes while Spark still plans the statement cancels its jobs as they start."""
        if self.remote:
            return self._cancellable_remote(statement)
        sc = self.spark.sparkContext
        group = f"topiclake-sql-{uuid.uuid4().hex[:8]}"
        cancelled = threading.Event()

        def cancel_group() -> None:
            # the group's running jobs, and the ones its statement would start next (an adaptive
            # query runs a job per stage: cancelling only the running ones let the next start)
            sc._jsc.sc().cancelJobGroupAndFutureJobs(group, "cancelled by Ctrl-C in topiclake sql")

        def cancel(_signum, _frame) -> None:
            if not cancelled.is_set():
                cancelled.set()
                threading.Thread(target=cancel_group, name=f"cancel-{group}", daemon=True).start()

        previous = signal.signal(signal.SIGINT, cancel)
        sc.setJobGroup(group, statement[:200], interruptOnCancel=True)
        try:
            result = execute(self.spark, statement, self.tables, max_rows=self.max_rows)
        except Exception:
            if cancelled.is_set():
                self._wait_until_stopped(group)
                raise QueryCancelled() from None
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
            sc.setLocalProperty("spark.jobGroup.id", None)
            sc.setLocalProperty("spark.job.description", None)
        if cancelled.is_set():  # Ctrl-C after the last job: the result is there, but was not wanted
            raise QueryCancelled()
        return result

    def _cancellable_remote(self, statement: str) -> QueryResult:
        """On the SQL server: the statement runs under a tag, and SIGINT interrupts that tag's
        operations there (Spark Connect's interrupt), not the shell."""
        tag = f"topiclake-sql-{uuid.uuid4().hex[:8]}"
        cancelled = threading.Event()

        def cancel(_signum, _frame) -> None:
            if not cancelled.is_set():
                cancelled.set()
                threading.Thread(target=self.spark.interruptTag, args=(tag,), daemon=True).start()

        previous = signal.signal(signal.SIGINT, cancel)
        self.spark.addTag(tag)
        try:
            result = execute(self.spark, statement, self.tables, max_rows=self.max_rows)
        except Exception:
            if cancelled.is_set():
                raise QueryCancelled() from None
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
            self.spark.removeTag(tag)
        if cancelled.is_set():
            raise QueryCancelled()
        return result

    def _wait_until_stopped(self, group: str, timeout_s: float = CANCEL_WAIT_S) -> None:
        """Back at the prompt only once no task of the cancelled statement runs any more (the
        next query would share the cores with them); says so if some still run after the wait."""
        left = running_tasks(self.spark, group)
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = running_tasks(self.spark, group)
        if left:
            print(f"sql: {left} task(s) of the cancelled query still running after {timeout_s:.0f} s",
                  file=sys.stderr, flush=True)


def _spark_ui(spark) -> str:
    ui = spark.sparkContext.uiWebUrl
    return f" Spark UI: {ui}" if ui else ""


def running_tasks(spark, group: str) -> int:
    """Tasks still running for jobs of the job group (0 when every job has ended)."""
    tracker = spark.sparkContext.statusTracker()
    count = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        if job is None or job.status != "RUNNING":
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            count += stage.numActiveTasks if stage is not None else 0
        count = count or 1  # a running job whose tasks have not started yet
    return count


def _one_history_entry(lines: list[str]) -> None:
    """readline keeps each typed line; a statement typed over several lines becomes one entry."""
    typed = [line for line in lines if line.strip()]
    if len(typed) < 2 or "readline" not in sys.modules:
        return
    import readline

    length = readline.get_current_history_length()  # items are numbered from 1, removed from 0
    if [readline.get_history_item(i) for i in range(length - len(typed) + 1, length + 1)] != typed:
        return
    for _ in typed:
        readline.remove_history_item(readline.get_current_history_length() - 1)
    readline.add_history(" ".join(line.strip() for line in typed))


def _open_history():
    """Load the shell's history (readline); returns the function that saves it."""
    try:
        import readline
    except ImportError:  # no readline on this platform: the shell works, without history
        return lambda: None
    path = Path(os.environ.get(HISTORY_ENV) or Path.home() / ".topiclake_sql_history")
    try:
        readline.read_history_file(path)
    except OSError:
        pass
    readline.set_history_length(1000)

    def save() -> None:
        try:
            readline.write_history_file(path)
        except OSError as exc:
            print(f"sql: history not saved to {path}: {exc.strerror}", file=sys.stderr)
    return save
