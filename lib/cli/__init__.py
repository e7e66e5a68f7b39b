"""The `topiclake` command. Each area's commands live in their own module; this only assembles."""

from __future__ import annotations

import typer

from .output import MARKUP_MODE

app = typer.Typer(
    name="topiclake",
    help="Kafka's log, made batch-native: broker, segment tools, Spark ingest and maintenance.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=MARKUP_MODE,  # rich panels wrap at 80 columns when stderr is piped
)

@app.callback()
def _main() -> None:
    """Kafka's log, made batch-native."""

from . import demo, dump  # noqa: E402  (demo: the quick start's job; dump-log)

demo.register(app)
dump.register(app)

from . import broker, topics  # noqa: E402  (broker start; topics create/list/describe/delete/alter-config)

broker.register(app)
topics.register(app)

from . import registry  # noqa: E402  (registry start: the schema registry beside a broker)

registry.register(app)

from . import groups  # noqa: E402  (groups list/describe/lag/reset-offsets)

groups.register(app)

from . import security  # noqa: E402  (users set/delete/list; acls add/remove/list)

security.register(app)

from . import backfill, coverage, ingest, rebuild, sql  # noqa: E402  (Spark jobs on local Spark: ingest, backfill, ...)

ingest.register(app)
rebuild.register(app)
backfill.register(app)
coverage.register(app)
sql.register(app)

from . import compact, merge_segments, retain  # noqa: E402  (maintenance jobs: compact, retain, merge-segments)

compact.register(app)
retain.register(app)
merge_segments.register(app)

from . import repair  # noqa: E402  (repair-log: truncate a damaged partition as Kafka's recovery does)

repair.register(app)

from . import data_docs  # noqa: E402  (data-docs: great-expectations' site of the stored validations)

data_docs.register(app)

from . import metrics  # noqa: E402  (metrics: the jobs' last runs, tables' lag and freshness, for Prometheus)

metrics.register(app)

from . import console  # noqa: E402  (console: the web console, topiclake.console)

console.register(app)

if __name__ == "__main__":  # pragma: no cover
    app()
