"""How every `topiclake` command reports failure: one line on stderr, never wrapped, a non-zero
exit, and the traceback only with --debug.

    def command(..., debug: bool = DEBUG_OPTION) -> None:
        with reported_errors(debug):
            ...                        # any exception becomes `error: <what went wrong>`, exit 1
        fail("topic x is not compacted")  # the same line for a problem the command finds itself

Rich (typer's usage panels, progress consoles) wraps at 80 columns when the stream is not a
terminal, which breaks a long path in an error line in two when it is piped or logged. Lines here
go out through click (no wrapping); `stderr_console()` is the one rich console for progress bars,
and `MARKUP_MODE` turns typer's boxed usage errors into click's plain ones when stderr is piped.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator, NoReturn

import click
import typer

DEBUG_OPTION = typer.Option(False, "--debug", help="Print the traceback of a failure.")

#: typer's rich help and usage panels on a terminal; click's plain, unwrapped text otherwise.
MARKUP_MODE = "rich" if sys.stderr.isatty() else None


def error_line(message: object) -> str:
    """`error: <message>` on one line (a multi-line message is joined)."""
    text = " ".join(part.strip() for part in str(message).splitlines() if part.strip())
    return f"error: {text}"


def print_error(message: object) -> None:
    """The error line on stderr (red on a terminal: click drops the colour when piped)."""
    line = error_line(message)
    click.echo(click.style("error:", fg="red") + line[len("error:"):], err=True)


def fail(message: object, code: int = 1) -> NoReturn:
    """Print the error line and end the command with exit code `code`."""
    print_error(message)
    raise typer.Exit(code)


def expected(exc: BaseException) -> bool:
    """Errors raised on purpose (TopiclakeError, the object store's StoreError) and the system's
    (OSError): their message is the whole story. Anything else is a bug, whose traceback matters."""
    from topiclake.segments.errors import TopiclakeError
    from topiclake.store.errors import StoreError

    return isinstance(exc, (TopiclakeError, StoreError, OSError))


def describe_exception(exc: BaseException) -> str:
    """What went wrong, for the error line. An OSError names its file (or address) and the
    system's reason; errors raised on purpose carry their own message; anything else says its
    type."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    if expected(exc):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


@contextmanager
def reported_errors(debug: bool = False) -> Iterator[None]:
    """Turn an exception escaping the block into the error line and exit code 1; with `debug`
    let it through, so Python prints the traceback."""
    try:
        yield
    except (click.exceptions.Exit, typer.Exit, click.exceptions.ClickException, click.exceptions.Abort):
        raise  # typer's own exits and usage errors
    except Exception as exc:  # every failure becomes one line; --debug shows the rest
        if debug:
            raise
        fail(describe_exception(exc) + ("" if expected(exc) else " (--debug prints the traceback)"))


def stderr_console():
    """A rich console on stderr for progress bars and status lines: it never wraps what it prints
    (soft wrap), and takes its width from the terminal only when stderr is one."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)
