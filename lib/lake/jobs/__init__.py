"""The lake jobs as commands: flags, checks before Spark starts, one-line errors, what a Ctrl-C left committed."""
