"""PySpark (Spark 4 Python data source API) access to the cluster's tables.

    from spark_tables import register, build_session
    spark = build_session("local[2]")          # sets PYSPARK_PYTHON etc. when unset
    register(spark)                            # format name "logcentric"
    df = (spark.read.format("logcentric").option("coordinators", "127.0.0.1:7000")
          .option("table", "events").load())
    df.write.format("logcentric").option("coordinators", ...).option("table", "out")
          .option("operation", "upsert").mode("append").save()

Everything goes through the client library (`coordinator.client.client`); no server code.
"""

from spark_tables.datasource import FORMAT_NAME, TableDataSource, register
from spark_tables.session import build_session, ensure_python_env

__all__ = ["FORMAT_NAME", "TableDataSource", "build_session", "ensure_python_env", "register"]
