"""Errors of the lake jobs. Each names the table, topic, partition and offsets involved, so a
failed Airflow task's log says what to look at without opening the code; `error_line` is any error
as the one line a command prints (Spark's and a failed task's included)."""

from __future__ import annotations

import re
import sys

from topiclake.segments.errors import TopiclakeError


class LakeError(TopiclakeError):
    """Base class of the lake's own errors."""


class DataLossError(LakeError):
    """Offsets that should be read next were deleted (retention) before they were ingested."""

    def __init__(self, topic: str, partition: int, first: int, end: int):
        self.topic, self.partition, self.first, self.end = topic, partition, first, end
        super().__init__(
            f"data loss in topic {topic!r} partition {partition}: offsets [{first}, {end}) were deleted "
            f"(retention) before they were ingested; the log now starts at {end}. Rerun with "
            f"--allow-data-loss to record the gap and continue from offset {end}")


class ConcurrentWriterError(LakeError):
    """Another writer committed offsets of the same group/partitions after this run planned."""


class SegmentChangedError(LakeError):
    """A segment file was replaced (compaction swap) or deleted between planning and reading."""


class UsageError(LakeError, ValueError):
    """A command-line value that cannot work (a bad flag, an unknown topic, a storage root that
    does not exist, a backfill range outside what was ingested). `hint` says what to do."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class OffsetSpecError(UsageError):
    """A --starting-offsets / --ending-offsets value that cannot be understood (a usage error: exit 2)."""


# --------------------------------------------------------------------------------- one-line errors

_POSITION = re.compile(r"\(?line (\d+),? pos(?:ition)? (\d+)\)?")
_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?([A-Z]\w*(?:Error|Exception)): (.+)$", re.MULTILINE)


def error_line(exc: BaseException) -> str:
    """One line saying what went wrong, with a hint where one helps."""
    hint = getattr(exc, "hint", None)
    if isinstance(exc, TopiclakeError):
        line = _first_line(str(exc))
    elif _is_spark_error(exc):
        line = spark_error_line(exc)
    else:
        line = f"{type(exc).__name__}: {_first_line(str(exc))} (a bug? --debug shows the traceback)"
    return f"{line} (hint: {hint})" if hint else line


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "(no message)"


def _is_spark_error(exc: BaseException) -> bool:
    if "pyspark" not in sys.modules:
        return False
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return isinstance(exc, (PySparkException, Py4JError))


def spark_error_line(exc: BaseException) -> str:
    """Spark's own message, first line, with the position in the statement when it has one.
    A Python error raised in a task (e.g. a corrupt segment) is reported as that error."""
    text = str(exc)
    tasks_error = _task_python_error(exc, text)
    if tasks_error:
        return tasks_error
    message = _spark_message(exc) or text
    line = _first_line(message)
    if line.startswith("[DELTA_"):  # Delta says what to do in the lines after the first: keep them
        line = " ".join([line] + _advice(message))
    position = _POSITION.search(text)
    if position and "line " not in line:
        line += f" (line {position.group(1)}, pos {position.group(2)})"
    return line


def _advice(message: str) -> list[str]:
    """The lines after a message's first, up to the query context or a stack trace."""
    out = []
    for line in message.strip().splitlines()[1:]:
        line = line.strip()
        if line.startswith(("==", "JVM stacktrace", "at ")) or line.startswith("SQLSTATE"):
            break
        if line:
            out.append(line)
    return out


def _spark_message(exc: BaseException) -> str | None:
    """The JVM's own words. Delta's error classes are not in Spark's message catalogue (asking
    Spark for their message fails: the exception's text has it); a JVM exception that is not a
    Spark error (py4j's "An error occurred while calling o41.sql.") is named by its class."""
    from py4j.protocol import Py4JJavaError

    if isinstance(exc, Py4JJavaError):
        try:
            java = exc.java_exception
            return f"{java.getClass().getSimpleName()}: {java.getMessage()}"
        except Exception:  # noqa: BLE001 - the JVM is gone: py4j's own text is all there is
            return None
    if hasattr(exc, "getMessage"):
        try:
            return exc.getMessage()
        except Exception:  # noqa: BLE001 - e.g. [INTERNAL_ERROR] Cannot find main error class 'DELTA_...'
            return None
    return None


def _task_python_error(exc: BaseException, text: str) -> str | None:
    """The last `SomeError: message` line of a Python traceback that a failed task sent back."""
    if "Traceback (most recent call last)" not in text:
        return None
    found = _PYTHON_ERROR.findall(text)
    if not found:
        return None
    kind, message = found[-1]
    return f"a Spark task failed: {kind}: {message}"
