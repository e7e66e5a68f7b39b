"""A lake job run as a command: what `spark-submit jobs/<job>.py` and `topiclake <job>` share.

- Output is progress, a summary, warnings and errors: Spark's INFO log and topiclake's info
  messages only with --verbose.
- Every error is ONE line on stderr (with a hint where one helps): exit 2 for a usage mistake,
  1 for a failure; the Python traceback only with --debug.
- Ctrl-C (SIGINT) prints one line saying what was committed and what was not, and exits 130.
- A reader of stdout that leaves early (`ingest | head -1`) ends the output quietly: exit 141, as
  a Unix tool killed by SIGPIPE.
- A run that fails is recorded for Prometheus (run_metrics) even when it fails before its job
  starts (a missing topic, Spark not starting): the job's own recording covers the rest.
- A SparkSession the command started is stopped before it returns, while the executors are still
  alive (see spark.stop_session).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import UsageError, error_line

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
EXIT_BROKEN_PIPE = 128 + 13  # as a Unix tool killed by SIGPIPE (`ingest | head -1`) exits


@dataclass(slots=True)
class Command:
    """What a job body tells the runner while it runs."""

    name: str
    # Says what a Ctrl-C left committed; set by the body once it knows what it will change.
    on_interrupt: Callable[[], str] | None = None
    # Where and for which (table, group) a failure is recorded, once the body knows them.
    root: Any = None  # a directory (Path) or an object-store root (S3Root); None: not recorded
    targets: Sequence[tuple[str, str]] = ()

    def record_failure(self, exc: BaseException) -> None:
        """Record a failure the job did not record itself (one before the job started)."""
        from ..metrics import run_metrics

        if self.root is None or run_metrics.was_recorded(exc):
            return
        run_metrics.record_quietly(self.root, [run_metrics.failure(self.name, table, group, exc)
                                               for table, group in self.targets])


def run_command(name: str, argv: Sequence[str], parser, body: Callable, *, prog: str | None = None) -> int:
    """Parse argv with `parser(prog)`, run `body(args, command)` and return the exit code."""
    from ..spark.python_workers import prefer_installed_pyspark
    from ..spark.session import active_session, stop_session

    prefer_installed_pyspark()  # under spark-submit: pyspark's bytecode, not its zip's sources
    argv = list(argv)
    debug = "--debug" in argv  # known before parsing, so that a parse error can show its traceback too
    command = Command(name)
    session_before = active_session()
    try:
        try:
            args = parser(prog).parse_args(argv)
            configure_logging(verbose=getattr(args, "verbose", False))
            return body(args, command)
        finally:
            session = active_session()
            if session is not None and session_before is None:
                stop_session(session, interrupted=_interrupted(sys.exc_info()[1]))
    except SystemExit as exc:  # argparse's --help
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt as exc:
        command.record_failure(exc)
        print(f"{name}: interrupted; {_what_was_committed(command, debug)}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - every error ends here, as one line
        if isinstance(exc, BrokenPipeError) and _stdout_gone():  # nothing to say, nobody to say it to
            _stdout_to_devnull()
            return EXIT_BROKEN_PIPE
        command.record_failure(exc)
        if _interrupted(exc):  # Ctrl-C cancelled the Spark job; its error replaced the KeyboardInterrupt
            print(f"{name}: interrupted; {_what_was_committed(command, debug)}", file=sys.stderr, flush=True)
            return EXIT_INTERRUPTED
        if debug:
            traceback.print_exc()
        print(f"error: {error_line(exc)}", file=sys.stderr, flush=True)
        return EXIT_USAGE if isinstance(exc, UsageError) else EXIT_FAILED


def _stdout_gone() -> bool:
    """Whether the reader of our stdout left (the pipe's write end polls as an error then), so a
    broken pipe is ours, not a socket's."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        return any(events & (select.POLLERR | select.POLLHUP) for _fd, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no real stdout (captured in a test): not a pipe
        return False


def _stdout_to_devnull() -> None:
    """Python flushes stdout once more at exit: into the closed pipe that would be a second error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _interrupted(exc: BaseException) -> bool:
    """A KeyboardInterrupt anywhere in the exception's chain."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _what_was_committed(command: Command, debug: bool) -> str:
    if command.on_interrupt is None:
        return "nothing was committed"
    try:
        return command.on_interrupt()
    except Exception as exc:  # noqa: BLE001 - the interrupt line must still be printed
        if debug:
            traceback.print_exc()
        return f"could not read what was committed ({error_line(exc)})"


def configure_logging(*, verbose: bool) -> None:
    """topiclake's own messages: warnings and errors, or everything from INFO with --verbose."""
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.WARNING)
    # Libraries' Python warnings (deprecations inside great-expectations...) are not the user's to act on
    logging.getLogger("py.warnings").setLevel(logging.INFO if verbose else logging.ERROR)
    # great-expectations' own INFO is about its API docs registry, not the run: kept out of --verbose
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
