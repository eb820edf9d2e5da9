"""PySpark (Spark 4 Python data source API) access to the cluster's tables.

    from logcentric.spark import build_session
    spark = build_session("local[2]")          # sets PYSPARK_PYTHON etc. when unset
    df = (spark.read.format("logcentric").option("coordinators", "127.0.0.1:7000")
          .option("table", "events").load())
    df.write.format("logcentric").option("coordinators", ...).option("table", "out")
          .option("operation", "upsert").mode("append").save()

Spark finds the source by its name wherever this package is installed (PySpark 4 looks up
the `pyspark_logcentric` module's `DefaultSource`); `register(spark)` is needed where it is
not installed, and gives reads their default number of tasks, the session's
defaultParallelism (found by name only, a read has one task per tablet unless its
"partitions" option says otherwise; design/spark.md, "Partitions"). Everything goes
through the client library (`logcentric.client`); no server code. Needs the `spark` extra
(pyspark).
"""

from logcentric.spark.datasource import FORMAT_NAME, TableDataSource, register
from logcentric.spark.session import build_session, ensure_python_env

__all__ = ["FORMAT_NAME", "TableDataSource", "build_session", "ensure_python_env", "register"]
