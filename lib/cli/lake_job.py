"""A lake job as a `topiclake` command: the arguments go, untouched, to the job's own parser
(topiclake.lake.jobs.flags), so `topiclake <job>` and `spark-submit jobs/<job>.py` take the same flags
and report errors the same way (one line; --debug for the traceback)."""

from __future__ import annotations

from typing import Callable, Sequence

import typer

PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def register_job(app: typer.Typer, name: str, main: Callable[[Sequence[str], str], int], summary: str) -> None:
    """`main(argv, prog)` is the job's entry (topiclake.lake.jobs.main); `summary` is its line in --help."""

    def command(ctx: typer.Context) -> None:
        raise typer.Exit(main(ctx.args, f"topiclake {name}"))

    command.__doc__ = summary
    app.command(name, context_settings=PASS_THROUGH, add_help_option=False)(command)
