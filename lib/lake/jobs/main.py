"""The lake jobs as commands: `spark-submit jobs/<job>.py ARGS` and `topiclake <job> ARGS` both
run `<job>_main(ARGS)` from here (flags.py parses, command.py reports).

Each main checks its arguments and storage before Spark starts (preflight.py), then imports the
heavy modules, runs the job with a progress display and prints its summary on stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from ..errors import UsageError
from . import flags, preflight
from .command import Command, run_command
from .flags import split_names

# The progress display is ours: Spark's console bar would fight with it for the terminal.
SPARK_CONF = {"spark.ui.showConsoleProgress": "false"}
EXIT_MISSING_OFFSETS = 3  # coverage: offsets the log holds and the table lacks, or a corrupt log


def _prepare_spark(args) -> None:
    """Once the arguments are checked, before the SparkSession starts."""
    from ..spark.session import leave_ctrl_c_to_python, set_spark_log

    set_spark_log(verbose=args.verbose)
    leave_ctrl_c_to_python()


def _partition_by(spec: str) -> tuple[str, ...]:
    from ..table.schema import parse_partition_by

    try:
        return parse_partition_by(spec)
    except ValueError as exc:
        raise UsageError(f"--partition-by {spec}: {exc}") from None


def _given(**values) -> dict:
    """Keyword arguments the user gave; the rest keep the options' own defaults."""
    return {k: v for k, v in values.items() if v is not None}


# ------------------------------------------------------------------------------------------ ingest

def ingest_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("ingest", argv, flags.ingest_parser, _ingest, prog=prog)


def _ingest(args, command: Command) -> int:
    root = preflight.resolve_tables_root(args.config, args.data)  # a bucket too: log/bucket.py
    topics = split_names(args.topic)
    from ..runs.ingest import ingest_targets

    command.root = root  # where a failure before the run is recorded (a directory or a bucket)
    command.targets = ingest_targets(args.table, topics, args.group)
    partitions = preflight.check_topics(root, topics)
    _prepare_spark(args)
    from topiclake.segments.settings import load_settings

    from ..keyed.table_kind import table_settings
    from ..runs.ingest import IngestOptions, format_summary, pipelines_for, run
    from ..spark.progress import report_progress
    from ..typed.hooks import RegistrySource
    from .interrupted import watch_ingest

    options = IngestOptions(
        topics=topics, root=root, table=args.table, group=args.group, starting_offsets=args.starting_offsets,
        ending_offsets=args.ending_offsets,
        partition_by=_partition_by(args.partition_by) if args.partition_by else None,
        allow_data_loss=args.allow_data_loss, schemas_dir=Path(args.schemas),
        expectations_dir=Path(args.expectations), bootstrap=args.bootstrap, data_docs=args.data_docs,
        client=preflight.client_security(args.config, args.command_config),
        registry=RegistrySource.from_settings(load_settings(args.config)),
        kind=args.kind, value_format=args.value_format, tables=table_settings(load_settings(args.config)),
        **_given(target_task_bytes=args.target_task_bytes))
    command.on_interrupt = watch_ingest(pipelines_for(options), {t: list(range(n)) for t, n in partitions.items()})
    with report_progress("ingest") as progress:
        result = run(options, master=args.master, progress=progress, spark_conf=SPARK_CONF)
    print(format_summary(result), flush=True)
    return 0


# ----------------------------------------------------------------------------------------- rebuild

def rebuild_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("rebuild", argv, flags.rebuild_parser, _rebuild, prog=prog)


def _rebuild(args, command: Command) -> int:
    root = preflight.resolve_root(args.config, args.data)
    preflight.check_table(root, args.table)
    if not args.kind:
        raise UsageError("rebuild needs --kind append or --kind upsert")
    topics = split_names(args.topic)
    if topics:
        preflight.check_topics(root, topics)
    _prepare_spark(args)
    from topiclake.segments.settings import load_settings

    from ..keyed.table_kind import table_settings
    from ..runs.rebuild import RebuildOptions, format_result, rebuild
    from ..spark.session import get_session

    options = RebuildOptions(root=root, table=args.table, kind=args.kind, value_format=args.value_format,
                             topics=topics, group=args.group, allow_data_loss=args.allow_data_loss,
                             ingest={"schemas_dir": Path(args.schemas), "expectations_dir": Path(args.expectations),
                                     "bootstrap": args.bootstrap,
                                     "tables": table_settings(load_settings(args.config))})
    result = rebuild(get_session("topiclake-rebuild", master=args.master, conf=SPARK_CONF), options)
    print(format_result(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------- backfill

def backfill_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("backfill", argv, flags.backfill_parser, _backfill, prog=prog)


def _topic_table(args, partitions: list[int] | None) -> tuple[Path, list[int]]:
    """Before Spark: the root (a directory, or an object-store root), the topic and its
    partitions, the table (backfill, coverage)."""
    root = preflight.resolve_tables_root(args.config, args.data)
    partitions = preflight.check_partitions(root, args.topic, partitions)
    preflight.check_table(root, args.table)
    return root, partitions


def _backfill(args, command: Command) -> int:
    from ..runs.ingest import ingest_targets

    root = preflight.resolve_tables_root(args.config, args.data)
    command.root = root  # where a failure before the run is recorded (a directory or a bucket)
    command.targets = ingest_targets(args.table, (), args.group)
    root, _partitions = _topic_table(args, [args.partition])
    from ..runs.backfill import BackfillOptions, backfill, check_range, format_result
    from ..spark.progress import report_progress
    from .interrupted import watch_backfill

    options = BackfillOptions(root=root, table=args.table, topic=args.topic, partition=args.partition,
                              from_offset=args.from_offset, to_offset=args.to_offset, group=args.group,
                              expectations_dir=Path(args.expectations), data_docs=args.data_docs,
                              **_given(target_task_bytes=args.target_task_bytes))
    checked = check_range(options)  # before Spark: an inverted or un-ingested range is said at once
    command.on_interrupt = watch_backfill(checked.table_uri,
                                          f"{args.topic}-{args.partition} offsets [{checked.start}, {checked.end})")
    _prepare_spark(args)
    from ..spark.session import get_session

    spark = get_session("topiclake-backfill", master=args.master, conf=SPARK_CONF,
                        root=None if isinstance(root, Path) else root)
    with report_progress("backfill") as progress:
        result = backfill(spark, options, progress=progress, checked=checked)
    print(format_result(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------- coverage

def coverage_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("coverage", argv, flags.coverage_parser, _coverage, prog=prog)


def _coverage(args, command: Command) -> int:
    root, partitions = _topic_table(args, args.partition)
    _prepare_spark(args)
    from ..runs.coverage import coverage, format_coverage
    from ..table.location import GROUP_PREFIX
    from ..spark.session import get_session

    group = args.group or GROUP_PREFIX + args.table.rstrip("/").rsplit("/", 1)[-1]
    spark = get_session("topiclake-coverage", master=args.master, conf=SPARK_CONF,
                        root=None if isinstance(root, Path) else root)  # a bucket's s3a settings
    report = coverage(spark, root, args.table, args.topic, partitions, group=group)
    print(format_coverage(report), flush=True)
    return EXIT_MISSING_OFFSETS if any(c.missing or c.corrupt for c in report) else 0


# --------------------------------------------------------------------------------------------- sql

def sql_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("sql", argv, flags.sql_parser, _sql, prog=prog)


def _sql(args, command: Command) -> int:

    if args.query and args.file:
        raise UsageError("give the statements as arguments or with --file, not both")
    root = preflight.resolve_tables_root(args.config, args.data)  # a bucket too: sql reads no log
    source = _sql_source(args)
    from ..sql import endpoint
    from ..sql.shell import SqlSession

    url = endpoint.choose(root, preflight.sql_endpoint(args.config, args.endpoint))
    if url is None:
        _prepare_spark(args)
        session = SqlSession.start(root, master=args.master, conf=SPARK_CONF, fmt=args.format,
                                   max_rows=args.max_rows)
    else:
        if args.verbose:
            print(f"sql: on the SQL server at {url}", file=sys.stderr, flush=True)
        session = SqlSession.connect(url, root, fmt=args.format, max_rows=args.max_rows)
    try:
        return session.shell() if source is None else session.run_script(source)
    finally:
        if url is not None:
            endpoint.disconnect(session.spark)  # this client's session; the server goes on


def sql_server_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("sql-server", argv, flags.sql_server_parser, _sql_server, prog=prog)


def _sql_server(args, command: Command) -> int:
    root = preflight.resolve_tables_root(args.config, args.data)
    from ..sql import endpoint

    endpoint.port_free(args.host, args.port)
    stop = endpoint.stop_on_signals()
    _prepare_spark(args)
    return endpoint.serve(root, host=args.host, port=args.port, master=args.master, conf=SPARK_CONF, stop=stop)


def _sql_source(args) -> str | None:
    """The statements to run; None: the interactive shell (no query, a terminal on stdin)."""

    if args.file == "-":
        return sys.stdin.read()
    if args.file:
        try:
            return Path(args.file).read_text()
        except OSError as exc:
            raise UsageError(f"cannot read --file {args.file}: {exc.strerror}") from None
    if args.query:
        return " ".join(args.query)
    if sys.stdin.isatty():
        return None
    return sys.stdin.read()  # statements piped in


# ----------------------------------------------------------------------------------------- compact

def _root_and_topics(args, command: Command, *, bucket: bool = False) -> tuple[Path, tuple[str, ...]]:
    """Before anything runs: the root (`bucket`: an object-store root is served too), and the
    --topic names if given (default: all of them)."""
    from ..metrics.run_metrics import topics_scope

    root = preflight.resolve_tables_root(args.config, args.data) if bucket else preflight.resolve_root(args.config,
                                                                                                       args.data)
    topics = split_names(args.topic)
    command.root = root  # where a failure before the run is recorded (a directory or a bucket)
    command.targets = [(topics_scope(topics), "")]
    if topics:
        preflight.check_topics(root, topics)
    return root, topics


def compact_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("compact", argv, flags.compact_parser, _compact, prog=prog)


def _compact(args, command: Command) -> int:
    root, topics = _root_and_topics(args, command, bucket=True)
    _prepare_spark(args)
    from ..runs.compaction import CompactOptions, compacted_partitions, format_summary, run
    from ..spark.progress import report_progress
    from .interrupted import watch_compaction

    options = CompactOptions(root=root, topics=topics, force=args.force, now_ms=args.now_ms,
                             **_given(target_task_bytes=args.target_task_bytes))
    command.on_interrupt = watch_compaction(root, compacted_partitions(root, topics))
    with report_progress("compact") as progress:
        result = run(options, master=args.master, progress=progress, spark_conf=SPARK_CONF)
    print(format_summary(result), flush=True)
    return 1 if result.errors else 0


# --------------------------------------------------------------------------------------- retention

def retention_main(argv: Sequence[str], prog: str | None = None) -> int:
    return run_command("retention", argv, flags.retention_parser, _retention, prog=prog)


def _retention(args, command: Command) -> int:
    root, topics = _root_and_topics(args, command, bucket=True)
    if args.dry_run:
        command.root = None  # a dry run is not a run of retention: not recorded
    from ..runs.retention import format_summary, options_from_args, retain

    args.data = str(root)
    options = options_from_args(args)
    if options.tables is not None:
        _prepare_spark(args)  # the tables' maintenance runs on Spark
    result = retain(options, spark_conf=SPARK_CONF)
    print(format_summary(result), flush=True)
    return 1 if result.errors else 0
