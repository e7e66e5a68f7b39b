"""The Spark session every lake job uses.

Settings that are correctness, not tuning: the session time zone is UTC (record dates and
timestamps must not depend on the machine that runs the job), Parquet timestamps are written as
microseconds (Delta has no nanosecond or INT96 timestamps), and Arrow transfer is on (mapInArrow
and toArrow move column batches, never per-record Python objects).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEFAULT_MASTER = "local[*]"

REQUIRED_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
    # Each planned task is one Spark partition: Spark must not coalesce or re-split them.
    "spark.sql.adaptive.enabled": "false",
}


def get_session(app_name: str = "topiclake", *, master: str | None = None, conf: dict[str, str] | None = None):
    """The active session if there is one (spark-submit, a test fixture), else a new one.

    `master` defaults to spark-submit's choice, then $MASTER, then local[*]. Without spark-submit,
    Python workers run the driver's interpreter unless PYSPARK_PYTHON says otherwise.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        for key, value in REQUIRED_CONF.items():  # all of them are runtime SQL settings
            active.conf.set(key, value)
        return active
    builder = SparkSession.builder.appName(app_name)
    if master or not _submitted():
        builder = builder.master(master or os.environ.get("MASTER", DEFAULT_MASTER))
        # Local workers run this Python; under spark-submit the cluster's setting is left alone
        # (a remote executor may not have this interpreter path).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        # Quiet driver logs for local runs; the driver JVM starts with this session.
        log4j = Path(__file__).with_name("log4j2.properties")
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log4j.as_uri()}")
    for key, value in {**REQUIRED_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _submitted() -> bool:
    """True under spark-submit, which launched this Python and already chose the master."""
    return "PYSPARK_GATEWAY_PORT" in os.environ
