"""A small, correctly configured SparkSession for jobs, tests and benchmarks.

Python workers must run the project's interpreter (the one with pyarrow, the client library
and this package), so PYSPARK_PYTHON / PYSPARK_DRIVER_PYTHON default to `sys.executable`, and
the repository root is put on PYTHONPATH so that workers import `logcentric` even when the
package is not installed (a source checkout). On a real cluster (`--master spark://...`) the
same interpreter path must exist on every worker with the package installed; pass
`python_path=` (conf `spark.pyspark.python`) when it differs from the driver's.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DRIVER_MEMORY_DEFAULT = "1g"
SHUFFLE_PARTITIONS_DEFAULT = 4


def ensure_python_env(python_path: str | None = None) -> str:
    """Set PYSPARK_PYTHON (and the driver's) when unset; returns the workers' interpreter.

    Must run before the first SparkSession is created: the JVM and its Python workers take
    their environment from this process at launch.
    """
    python = python_path or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO_ROOT) not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *parts])
    return python


def build_session(
    master: str = "local[*]",
    app_name: str = "logcentric",
    *,
    python_path: str | None = None,
    driver_memory: str = DRIVER_MEMORY_DEFAULT,
    shuffle_partitions: int = SHUFFLE_PARTITIONS_DEFAULT,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the UI off, few shuffle partitions and the data source registered."""
    from logcentric.spark.datasource import register

    python = ensure_python_env(python_path)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.memory", driver_memory)
        .config("spark.pyspark.python", python)
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
    )
    for key, value in (extra_conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
