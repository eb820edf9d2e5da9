"""Lets Spark find the "logcentric" data source with no `register` call.

PySpark 4 looks, on its first use of a Python data source, for installed top-level modules
named `pyspark_*` that define `DefaultSource` (a `pyspark.sql.datasource.DataSource`), and
registers each under its `name()`. This module is that entry; the source itself is
`logcentric.spark.datasource.TableDataSource`.
"""

from logcentric.spark.datasource import TableDataSource as DefaultSource

__all__ = ["DefaultSource"]
