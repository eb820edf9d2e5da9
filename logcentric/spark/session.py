"""A small, correctly configured SparkSession for jobs, tests and benchmarks.

Who chooses what:
- The master is the caller's only when given (`build_session("spark://h:7077")`). Left None,
  the builder sets none, so `spark-submit --master ...` (or the `spark.master` conf) wins,
  and Spark's own default, `local[*]`, applies when nothing set one.
- Under spark-submit (the JVM was started before this Python process), every conf the
  submission set is left as it is: this module only fills keys it did not set, and it does
  not touch the executors' environment (how their Python finds this package is the
  submitter's choice: an installed package, or `--py-files`; design/spark.md).
- Started from Python (`python -m jobs.pipeline`, tests), Python workers run this
  interpreter (`PYSPARK_PYTHON`, conf `spark.pyspark.python`; `python_path=` to change it),
  and a source checkout is put on the workers' `PYTHONPATH`, so a checkout works without
  installing the package.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

# The checkout this module runs from, if it is one (an installed package has no pyproject).
_SOURCE_ROOT = Path(__file__).resolve().parent.parent.parent
CHECKOUT_ROOT = _SOURCE_ROOT if (_SOURCE_ROOT / "pyproject.toml").is_file() else None
DRIVER_MEMORY_DEFAULT = "1g"
SHUFFLE_PARTITIONS_DEFAULT = 4


def submitted() -> bool:
    """Whether spark-submit (or the pyspark shell) started this process: the JVM runs
    already and hands its gateway to Python through the environment."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def ensure_python_env(python_path: str | None = None) -> str:
    """Set PYSPARK_PYTHON (and the driver's) when unset; returns the workers' interpreter.

    Must run before the first SparkSession is created: the JVM and its Python workers take
    their environment from this process at launch. A source checkout is added to
    PYTHONPATH so that the workers import `logcentric` without an install.
    """
    python = python_path or os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_PYTHON"] = python
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if CHECKOUT_ROOT is not None:
        parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        if str(CHECKOUT_ROOT) not in parts:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT_ROOT), *parts])
    return python


def _submitted_conf() -> dict[str, str]:
    """The conf spark-submit gave the JVM (its --conf, --master, spark-defaults.conf)."""
    # Connects to the running JVM (the gateway spark-submit started); it starts nothing.
    SparkContext._ensure_initialized()
    return dict(SparkConf().getAll())


def build_session(
    master: str | None = None,
    app_name: str = "logcentric",
    *,
    python_path: str | None = None,
    driver_memory: str = DRIVER_MEMORY_DEFAULT,
    shuffle_partitions: int = SHUFFLE_PARTITIONS_DEFAULT,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with few shuffle partitions, no progress bars and the data source
    registered. `master` None: spark-submit's, the conf's, else local[*] (module docstring)."""
    from logcentric.spark.datasource import register

    conf: dict[str, str] = {
        "spark.app.name": app_name,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
    }
    if submitted():
        given = _submitted_conf()
        conf = {k: v for k, v in conf.items() if k not in given}
        if python_path:
            conf["spark.pyspark.python"] = python_path
    else:
        python = ensure_python_env(python_path)
        conf["spark.ui.enabled"] = "false"
        conf["spark.driver.memory"] = driver_memory
        conf["spark.pyspark.python"] = python
        if CHECKOUT_ROOT is not None:
            conf["spark.executorEnv.PYTHONPATH"] = os.environ["PYTHONPATH"]
    conf.update(extra_conf or {})
    builder = SparkSession.builder
    if master is not None:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
