"""Apache Kafka's command-line tools as test peers (the jars bin/fetch-peers fetches from Maven Central)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .broker_process import BrokerProcess
from .paths import REPO

# As Kafka's own test brokers: no initial rebalance delay, short sessions allowed.
BROKER_TOML = "[groups]\ninitial_rebalance_delay_ms = 0\nmin_session_timeout_ms = 1000\n"


def peer_broker_process(tmp: Path) -> BrokerProcess:
    """A started `topiclake broker start` process under `tmp`, with Kafka's test-broker group settings."""
    config = tmp / "broker.toml"
    config.write_text(BROKER_TOML)
    return BrokerProcess(tmp / "data", config=config).start()


def spark_submit_with_kafka_source(script: Path, *args: str) -> subprocess.CompletedProcess:
    """`spark-submit --master local[2] SCRIPT ARGS` with Spark's Kafka source on the class path."""
    from bench._kafka import fetch_peers

    jars = ",".join(str(j) for j in sorted(Path(fetch_peers("spark-kafka")["SPARK_KAFKA_JARS"]).glob("*.jar")))
    return subprocess.run([str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]", "--jars", jars,
                           "--conf", "spark.ui.enabled=false", str(script), *args],
                          capture_output=True, text=True, timeout=300, cwd=REPO)


@dataclass(frozen=True)
class KafkaTools:
    """Runs `$KAFKA_HOME/bin/<tool>.sh ARGS` (each a `java -cp libs/* <main class>`)."""

    home: Path
    version: str

    def run(self, tool: str, *args: str, input: str | None = None, timeout: float = 90,
            check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([str(self.home / "bin" / f"{tool}.sh"), *args], input=input, capture_output=True,
                              text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"{tool} {' '.join(args)} exited {done.returncode}:\n" \
                                         f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done

    def __call__(self, tool: str, *args: str, **kwargs) -> str:
        """The tool's standard output (it must exit 0)."""
        return self.run(tool, *args, **kwargs).stdout
