"""The command-line flags of every lake job, defined once.

`spark-submit jobs/<job>.py ARGS` and `topiclake <job> ARGS` parse ARGS with the same parser
from here, so the two cannot drift. Parse errors are one line (UsageError), never argparse's
usage dump. Imports stay light: a wrong flag is reported before pyspark or pyarrow load.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Callable

from ..errors import UsageError

ROOT_HELP = "storage root (default: $TOPICLAKE_ROOT, [storage] root in the settings file, ./data)"


class OneLineParser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing its usage and exiting."""

    def error(self, message: str):  # argparse's hook for every parse error
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        self._refuse_unknown_options(args)
        return super().parse_args(args, namespace)

    def _refuse_unknown_options(self, args: list[str]) -> None:
        """A misspelt option is named as such, as click does ("No such option: --topc"), before
        argparse would report the option it replaced as missing ("--topic is required")."""
        known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        for arg in args:
            if arg == "--":
                return
            if not _LONG_OPTION.fullmatch(arg):
                continue
            name = arg.split("=", 1)[0]
            if not any(option.startswith(name) for option in known):  # argparse takes unique prefixes
                close = difflib.get_close_matches(name, known, n=1)
                self.error(f"No such option: {name}" + (f" (did you mean {close[0]}?)" if close else ""))


_LONG_OPTION = re.compile(r"--[A-Za-z][\w-]*(=.*)?", re.S)
# What SparkContext takes as a master: local, local[N|*], local[N|*,F], local-cluster[N,C,M], or a URL.
_MASTER = re.compile(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|yarn|"
                     r"(spark|k8s|mesos)://\S+")


def _master(value: str) -> str | None:
    """--master, checked before Spark starts (Spark's refusal is a Java stack trace)."""
    if value and not _MASTER.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Spark master: local, local[N], local[*], local[N,F], local-cluster[N,C,MB], "
            "spark://HOST:PORT, yarn or k8s://URL")
    return value or None


def _offsets(allow_time: bool) -> Callable[[str], str | None]:
    """--starting-offsets / --ending-offsets, checked as they are parsed (a usage error)."""
    def parse(value: str) -> str | None:
        from ..log.offsets import EARLIEST, OffsetSpecError, parse_offset_spec

        try:
            parse_offset_spec(value, default=EARLIEST, allow_time=allow_time)
        except OffsetSpecError as exc:
            name = "--starting-offsets" if allow_time else "--ending-offsets"
            raise argparse.ArgumentTypeError(str(exc).removeprefix(name).lstrip(": ")) from None
        return value or None
    parse.__name__ = "offsets"
    return parse


def _optional(value: str) -> str | None:
    """An empty value means "not given": templated callers (the Airflow DAGs) pass every flag."""
    return value or None


def _count(minimum: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"{number} is below {minimum}")
        return number
    parse.__name__ = "number"
    return parse


def _offset(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an offset (a whole number)") from None


def _parser(job: str, description: str, prog: str | None) -> OneLineParser:
    return OneLineParser(prog=prog or f"{job}.py", description=description,
                         epilog="Errors are one line on stderr; --debug adds the Python traceback.")


def _common(p: OneLineParser) -> None:
    """Flags every job takes."""
    p.add_argument("--data", type=_optional, metavar="DIR", help=ROOT_HELP)
    p.add_argument("--config", type=_optional, metavar="FILE",
                   help="settings file (default: $TOPICLAKE_CONFIG, conf/topiclake.toml)")
    p.add_argument("--master", type=_master, metavar="URL",
                   help="Spark master when not run by spark-submit (default: local[*])")
    p.add_argument("--verbose", action="store_true", help="Spark's own log (INFO) and topiclake's info messages")
    p.add_argument("--debug", action="store_true", help="print the Python traceback of an error")


def _table_and_topic(p: OneLineParser) -> None:
    """A job over one topic's table."""
    p.add_argument("--table", required=True, help="table name under <root>/tables, or a path/URI")
    p.add_argument("--topic", required=True, metavar="T")


def _data_docs(p: OneLineParser) -> None:
    p.add_argument("--data-docs", action="store_true",
                   help="also rebuild the great-expectations Data Docs site under <root>/quality in this run "
                        "(a bucket's too, once per run; loads great-expectations: seconds); otherwise `topiclake "
                        "data-docs` builds it from the validation results every run stores")


def _kind_and_format(p: OneLineParser, which: str) -> None:
    p.add_argument("--kind", type=_optional, metavar="append|upsert",
                   help=f"append: every record a row; upsert: one row per key, its latest value, {which}")
    p.add_argument("--format", dest="value_format", type=_optional, metavar="raw|debezium",
                   help="how an upsert table reads its records: raw (key and value; a null value deletes) or "
                        "debezium (Debezium change events, the rows they describe; implies --kind upsert); "
                        "default: [tables.<name>] format, else raw")


def rebuild_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("rebuild", "Rebuild a table from the log (from the earliest offset) as another kind; the new table "
                           "replaces the old one in one atomic directory swap.", prog)
    p.add_argument("table", help="table name under <root>/tables, or a path")
    p.add_argument("--topic", action="append", metavar="T",
                   help="its topics (repeatable; default: the ones the table records)")
    p.add_argument("--group", type=_optional, metavar="G", help="consumer group id (default: topiclake-ingest-<table>)")
    _kind_and_format(p, "of the rebuilt table")
    p.add_argument("--schemas", default="conf/schemas", metavar="DIR", help="directory of <table>.json value schemas")
    p.add_argument("--expectations", default="conf/expectations", metavar="DIR",
                   help="directory of <table>.json great-expectations suites")
    p.add_argument("--bootstrap", type=_optional, metavar="HOST:PORT", help="broker to mirror offsets to ('none': off)")
    p.add_argument("--allow-data-loss", action="store_true",
                   help="rebuild even when retention deleted offsets of the log that the table holds rows of "
                        "(those rows are lost); without it such a rebuild is refused")
    _common(p)
    return p


def split_names(values: list[str] | None) -> tuple[str, ...]:
    """Repeatable flags that also take a,b,c."""
    return tuple(name for value in values or () for name in value.split(",") if name)


def ingest_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("ingest", "Kafka segment files -> Delta tables, exactly once.", prog)
    p.add_argument("--topic", action="append", required=True, metavar="T",
                   help="topic to ingest (repeatable, or a,b,c)")
    p.add_argument("--table", type=_optional,
                   help="table name under <root>/tables, or a path/URI (default: one table per topic)")
    p.add_argument("--group", type=_optional, metavar="G", help="consumer group id (default: topiclake-ingest-<table>)")
    p.add_argument("--starting-offsets", type=_offsets(allow_time=True), metavar="SPEC",
                   help="where a new group starts: earliest (default), latest, JSON or ISO time")
    p.add_argument("--ending-offsets", type=_offsets(allow_time=False), metavar="SPEC",
                   help="where the run stops: latest (default, the last stable offset) or JSON")
    p.add_argument("--target-task-bytes", type=_count(1), metavar="N", help="bytes of segment data per Spark task")
    p.add_argument("--partition-by", type=_optional, metavar="SPEC",
                   help="partitioning of new tables by the record timestamp: day (record_date, the default), "
                        "hour (record_date, record_hour) or none")
    _kind_and_format(p, "of a new table (default: [tables.<name>] kind in the settings file, else upsert for "
                        "--format debezium or a topic whose cleanup.policy is compact, append otherwise); an "
                        "existing table keeps its kind")
    p.add_argument("--allow-data-loss", action="store_true",
                   help="record offsets deleted by retention before ingestion as a gap instead of failing")
    p.add_argument("--schemas", default="conf/schemas", metavar="DIR",
                   help="directory of <table>.json value schemas (typed columns; default conf/schemas)")
    p.add_argument("--expectations", default="conf/expectations", metavar="DIR",
                   help="directory of <table>.json great-expectations suites (default conf/expectations; "
                        "a table without one gets the default suite)")
    _data_docs(p)
    p.add_argument("--bootstrap", type=_optional, metavar="HOST:PORT",
                   help="broker to mirror the group's offsets to (host:port); default: the brokers registered "
                        "under <root>/cluster/brokers; 'none' turns mirroring off")
    p.add_argument("--command-config", type=_optional, metavar="FILE",
                   help="client properties for a secured broker (security.protocol, sasl.mechanism, "
                        "sasl.jaas.config, ...); default: [client] of the settings file")
    _common(p)
    return p


def backfill_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("backfill", "Re-read offsets [from, to) of one topic partition and replace exactly those rows "
                            "of the table in one commit (idempotent; the group's offsets do not move).", prog)
    _table_and_topic(p)
    p.add_argument("--partition", type=_count(0), required=True)
    p.add_argument("--from", dest="from_offset", type=_offset, required=True, help="first offset (inclusive)")
    p.add_argument("--to", dest="to_offset", type=_offset, required=True, help="end offset (exclusive)")
    p.add_argument("--group", type=_optional, metavar="G",
                   help="the ingest group whose offsets bound the range (default: topiclake-ingest-<table>)")
    p.add_argument("--target-task-bytes", type=_count(1), metavar="N", help="bytes of segment data per Spark task")
    p.add_argument("--expectations", default="conf/expectations", metavar="DIR",
                   help="directory of <table>.json great-expectations suites (default conf/expectations)")
    _data_docs(p)
    _common(p)
    return p


def coverage_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("coverage", "Offset coverage of a topic table per partition: the ranges it holds and the reason "
                            "for every gap. Exits 3 when some partition has missing offsets.", prog)
    _table_and_topic(p)
    p.add_argument("--partition", type=_count(0), action="append", help="partition (repeatable; default: all)")
    p.add_argument("--group", type=_optional, metavar="G", help="ingest group (default: topiclake-ingest-<table>)")
    _common(p)
    return p


def sql_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("sql", "Spark SQL over the topic tables (each a view of its current Delta snapshot). "
                       "Several statements run in one session; with no query on a terminal, an interactive "
                       "shell.", prog)
    p.add_argument("query", nargs="*", help="SQL statements (several: separate them with ';')")
    p.add_argument("-f", "--file", metavar="FILE", help="read the statements from this file ('-': standard input)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    p.add_argument("--max-rows", type=_count(1), default=1000, metavar="N",
                   help="rows to print at most per query (default 1000)")
    p.add_argument("--endpoint", type=_optional, metavar="URL",
                   help="the standing SQL server to run on (sc://HOST:PORT; 'none': a Spark of this process; "
                        "default: $TOPICLAKE_SQL_ENDPOINT, [sql] endpoint, else the root's running "
                        "`topiclake sql-server`, else a Spark of this process)")
    _common(p)
    return p


def sql_server_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("sql-server", "A standing Spark SQL server over the topic tables (Spark Connect): `topiclake sql` "
                              "and any Spark Connect client query it without starting Spark. Runs until "
                              "SIGTERM or Ctrl-C.", prog)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_count(1), default=15002, help="port to listen on (default 15002)")
    _common(p)
    return p


def compact_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("compact", "Kafka log compaction of compacted topics (key map and rewrite on executors, "
                           "crash-safe swap on the driver). Exits 1 when a partition failed.", prog)
    p.add_argument("--topic", action="append", default=[],
                   help="topic to compact (repeatable, or a,b,c; default: every compacted topic)")
    p.add_argument("--force", action="store_true",
                   help="clean every partition with a cleanable range, whatever min.cleanable.dirty.ratio says")
    p.add_argument("--target-task-bytes", type=_count(1), metavar="N",
                   help="a partition's dirty bytes above which its key map is built by several tasks of "
                        "about this size, when there are fewer partitions than task slots (a directory root; "
                        "otherwise, and on a bucket root, a partition is cleaned in one task)")
    p.add_argument("--now-ms", type=_count(0), help="the cleaner's clock in epoch ms (default: now)")
    _common(p)
    return p


def retention_parser(prog: str | None = None) -> OneLineParser:
    p = _parser("retention", "Segment retention (retention.ms / retention.bytes), with no Spark session, and the "
                             "tables' maintenance (delta-spark, on the Spark master). Exits 1 when a partition or "
                             "table failed.", prog)
    p.add_argument("--topic", action="append", default=[], help="topic (repeatable, or a,b,c; default: all)")
    p.add_argument("--protect-groups", action="append", default=[],
                   help="consumer groups whose uncommitted offsets must not be deleted (G1,G2)")
    p.add_argument("--now-ms", type=_count(0), help="retention clock in epoch ms (default: now)")
    p.add_argument("--dry-run", action="store_true", help="report what would be deleted, change nothing")
    p.add_argument("--table", action="append", default=[], help="table for table maintenance (default: all)")
    p.add_argument("--table-retention-days", type=_count(0), help="remove table rows whose record_date is older")
    p.add_argument("--optimize", action="store_true", help="compact small files of the tables")
    p.add_argument("--target-file-bytes", type=_count(1), help="optimize's target file size")
    p.add_argument("--vacuum-hours", type=_count(0), help="vacuum unreferenced files older than this")
    _common(p)
    return p


PARSERS: dict[str, Callable[[str | None], OneLineParser]] = {
    "ingest": ingest_parser, "backfill": backfill_parser, "coverage": coverage_parser, "sql": sql_parser,
    "compact": compact_parser, "retention": retention_parser,
}
