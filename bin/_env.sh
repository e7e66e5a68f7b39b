# Sourced by bin/quickstart and bin/test: makes sure .venv exists with topiclake and everything
# it needs installed, and that Java (for Spark) is there. Quick when nothing changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "topiclake needs Python >= 3.11 (found: $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
    exit 1
fi

# Debian packages the install needs: only root with apt-get can add them; others are told what to install.
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {  # apt_install "why" PACKAGE...
    local why=$1 package shown=(); shift
    for package in "$@"; do [[ $package == -* ]] || shown+=("$package"); done
    echo "Installing ${shown[*]} ($why)..." >&2
    apt-get update -qq && apt-get install -y -qq "$@" >/dev/null
}

# Spark needs Java 17 or newer.
java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ] 2>/dev/null; then
    if can_apt; then
        apt_install "Spark needs Java 17" openjdk-17-jre-headless
    else
        echo "Spark needs Java 17+: install it (e.g. apt-get install openjdk-17-jre-headless) and retry" >&2
        exit 1
    fi
fi

# The Delta LogStore of object-store tables (topiclake.lake.spark.logstore) is compiled at install: javac.
if ! command -v javac >/dev/null 2>&1; then
    if can_apt; then
        apt_install "the Java compiler builds topiclake's Delta LogStore" openjdk-17-jdk-headless
    else
        echo "topiclake compiles its Delta LogStore with javac: install a JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless) and retry" >&2
        exit 1
    fi
fi

# --- cluster mode (docs/CLUSTER.md): ZooKeeper from Debian's `zookeeper` package, for the tests and
# bin/zookeeper. Only root can install it; without it the cluster tests fail with the apt command.
if [ ! -f /usr/share/java/zookeeper.jar ] && can_apt; then
    apt_install "cluster mode tests" --no-install-recommends zookeeper
fi
# --- end cluster mode

# --- test peers (issue 20): kcat from Debian (tests/peers run it against the broker). Apache Kafka's
# jars come from Maven Central through bin/fetch-peers, which the peer tests run themselves (once).
if ! command -v kcat >/dev/null 2>&1 && can_apt; then
    apt_install "a test peer" kcat
fi
# --- end test peers

# --- console (issue 22): headless Chromium from Debian's `chromium`, which the console's browser tests
# drive with Playwright (executable_path=/usr/bin/chromium: Playwright downloads no browser here).
if [ ! -x /usr/bin/chromium ] && can_apt; then
    apt_install "console browser tests" chromium
fi
# --- end console

# --- object storage (issue 29): versitygw, the S3 server of the tests and the quick start (docs/STACK.md),
# built from its Go module into .venv/bin once per pinned version (1-5 minutes). It needs Go >= 1.25:
# with an older Go (Debian's golang-go), GOTOOLCHAIN=auto fetches the toolchain from the Go proxy.
VERSITYGW_VERSION=v1.8.0
versitygw_current() { go version -m .venv/bin/versitygw 2>/dev/null | grep -q "versity/versitygw[[:space:]]*$VERSITYGW_VERSION"; }
if ! command -v go >/dev/null 2>&1 && can_apt; then
    apt_install "it builds versitygw, the tests' S3 server" golang-go
fi
if ! command -v go >/dev/null 2>&1; then
    [ -x .venv/bin/versitygw ] || echo "warning: no Go to build versitygw $VERSITYGW_VERSION (the S3 tests need it): install Go >= 1.25 and retry" >&2
elif [ ! -x .venv/bin/versitygw ] || ! versitygw_current; then
    echo "Building versitygw $VERSITYGW_VERSION into .venv/bin (once per version, 1-5 minutes)..." >&2
    mkdir -p .venv
    GOBIN="$ROOT/.venv/bin" GOTOOLCHAIN=auto go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION" \
        >.venv/versitygw-build.log 2>&1 \
        || echo "warning: versitygw did not build with $(go version) (it needs Go >= 1.25; the S3 tests need it): see .venv/versitygw-build.log" >&2
fi
# --- end object storage

if [ ! -x .venv/bin/python ]; then
    echo "Creating .venv..." >&2
    "$PYTHON" -m venv .venv
    .venv/bin/pip install -q --upgrade pip setuptools wheel
fi

# Reinstall when the packaging or the native kernels change, headers included (editable install: Python
# edits need nothing).
stamp=".venv/.topiclake-installed"
want="$(cat pyproject.toml setup.py lib/segments/_native/*.[ch] lib/lake/typed/_native/*.[ch] | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    echo "Installing topiclake and its dependencies into .venv..." >&2
    .venv/bin/pip install -q -e ".[dev]"
    # Airflow (dags/): same venv; the Spark provider without its dependencies (STACK-NOTES: its
    # pyspark-client would silently replace pyspark's files), then check pyspark survived.
    .venv/bin/pip install -q -e ".[airflow]"
    .venv/bin/pip install -q --no-deps "apache-airflow-providers-apache-spark==6.3.4"
    pyspark_pin="$(sed -n 's/.*"pyspark\[[a-z,]*\]==\([0-9.]*\)".*/\1/p' pyproject.toml)"  # the lake extra's pin
    pyspark_version="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("pyspark"))')"
    if [ "$pyspark_version" != "$pyspark_pin" ] || .venv/bin/pip show -q pyspark-client >/dev/null 2>&1; then
        echo "pyspark is $pyspark_version (or pyspark-client got installed) after the Airflow install: want $pyspark_pin alone" >&2
        exit 1
    fi
    echo "$want" > "$stamp"
    # written again below for this install: the wrapper's JVM options, the archive of its jars
    rm -f .venv/bin/spark-submit .venv/share/topiclake/spark-driver-*.jsa
fi
# Delta's and s3a's JVM jars (topiclake.lake.spark.jars): Maven resolves lib/lake/spark/pom.xml into the
# machine's repository (~/.cache/topiclake/m2: the AWS SDK bundle, ~690 MB, once per machine) and the venv
# links them, when the project installs (again when the pom or the LogStore changes), never when a job runs.
if ! .venv/bin/python -c 'import sys; from topiclake.lake.spark.jars import installed_for; sys.exit(not installed_for())'; then
    if ! command -v mvn >/dev/null 2>&1; then
        if can_apt; then
            apt_install "it fetches Delta's jars once" maven
        else
            echo "Delta's jars are fetched with Maven: install it (e.g. apt-get install maven) and retry" >&2
            exit 1
        fi
    fi
    echo "Resolving Delta's and s3a's jars (Maven Central, once per machine) into .venv..." >&2
    .venv/bin/python -m topiclake.lake.spark.jars install >/dev/null
    # the class archive holds Delta's classes, the wrapper names the jars: both are made again
    rm -f .venv/bin/spark-submit .venv/share/topiclake/spark-driver-*.jsa
fi
# The driver JVM's class-data sharing archive (topiclake.lake.spark.jvm): made once per install, it cuts
# the start-up every spark-submit pays by about a second. Without it jobs only start slower.
if [ ! -f "$(.venv/bin/python -c 'from topiclake.lake.spark.jvm import archive_path; print(archive_path())')" ]; then
    echo "Building the Spark driver's JVM class archive (once per install)..." >&2
    SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}" .venv/bin/python -m topiclake.lake.spark.jvm build >/dev/null \
        || echo "warning: no JVM class archive (jobs start slower); retry: .venv/bin/python -m topiclake.lake.spark.jvm build" >&2
    rm -f .venv/bin/spark-submit
fi
# pip's .venv/bin/spark-submit finds SPARK_HOME with whatever `python3` is first on PATH
# (find-spark-home), which outside the venv has no pyspark ("Could not find valid SPARK_HOME"), and
# would run the job with that python too. Replace it with a wrapper that names this venv's pyspark
# and Python, so `.venv/bin/spark-submit jobs/ingest.py ...` works without activating the venv, and
# that starts the driver JVM with topiclake.lake.spark.jvm's options (a caller's SPARK_SUBMIT_OPTS win).
wrapper=".venv/bin/spark-submit"
if ! grep -q "topiclake: bin/_env.sh v5" "$wrapper" 2>/dev/null; then
    spark_home="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
    jvm_options="$(.venv/bin/python -m topiclake.lake.spark.jvm options)"
    jvm_options="$jvm_options -Dlog4j2.configurationFile=$(.venv/bin/python -c 'from topiclake.lake.spark.session import LOG4J_CONFIG; print(LOG4J_CONFIG.as_uri())')"
    delta_classpath="$(.venv/bin/python -m topiclake.lake.spark.jars --classpath)"
    cat > "$wrapper" <<WRAPPER
#!/usr/bin/env bash
# topiclake: bin/_env.sh v5 wrote this. spark-submit of this venv's pyspark, with this venv's Python
# for the driver and local workers unless PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON say otherwise,
# the driver JVM start-up options of topiclake.lake.spark.jvm and topiclake's quiet log4j2 configuration
# (--verbose brings Spark's back) before the caller's SPARK_SUBMIT_OPTS, Delta's jars on the
# driver's class path after Spark's (topiclake.lake.spark.jars), and the JVM's stderr without the
# incubator-module warning that Spark's launcher makes it print.
venv_bin="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
export SPARK_HOME="\${SPARK_HOME:-$spark_home}"
export PYSPARK_PYTHON="\${PYSPARK_PYTHON:-\$venv_bin/python}"
export PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-\$venv_bin/python}"
export SPARK_SUBMIT_OPTS="$jvm_options\${SPARK_SUBMIT_OPTS:+ \$SPARK_SUBMIT_OPTS}"
case ":\${SPARK_DIST_CLASSPATH:-}:" in
    *":$delta_classpath:"*) ;;
    *) export SPARK_DIST_CLASSPATH="\${SPARK_DIST_CLASSPATH:+\$SPARK_DIST_CLASSPATH:}$delta_classpath" ;;
esac
exec "$spark_home/bin/spark-submit" "\$@" 2> >(exec sed -u '/^WARNING: Using incubator modules: jdk.incubator.vector\$/d' >&2)
WRAPPER
    chmod +x "$wrapper"
fi
export PATH="$ROOT/.venv/bin:$PATH"
export PYSPARK_PYTHON="$ROOT/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$ROOT/.venv/bin/python"
# Spark binds the machine's outward address by default; everything here is local.
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
