"""Smoke test of the Spark 4 Python data source API on this machine: a reader that yields
Arrow batches and an Arrow writer, on local[2], with only pyarrow (no pandas or numpy)."""

from __future__ import annotations

import importlib.util

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

pytestmark = pytest.mark.spark


class _Reader(DataSourceReader):
    def partitions(self):
        return [InputPartition(0), InputPartition(1)]

    def read(self, partition):
        base = partition.value * 10
        yield pa.RecordBatch.from_pydict(
            {"id": pa.array([base, base + 1, base + 2], pa.int64()),
             "s": pa.array(["a", None, "c"])}
        )  # fmt: skip


class _Commit(WriterCommitMessage):
    def __init__(self, rows: int, types: str) -> None:
        self.rows = rows
        self.types = types


class _Writer(DataSourceArrowWriter):
    def __init__(self, path: str) -> None:
        self.path = path

    def write(self, iterator):
        rows, types = 0, ""
        for batch in iterator:
            assert isinstance(batch, pa.RecordBatch)
            rows += batch.num_rows
            types = ",".join(str(t) for t in batch.schema.types)
        return _Commit(rows, types)

    def commit(self, messages):
        with open(self.path, "w") as f:
            f.write(f"{sum(m.rows for m in messages)} {messages[0].types}")


class _Source(DataSource):
    @classmethod
    def name(cls):
        return "smoke_arrow"

    def schema(self):
        return "id long, s string"

    def reader(self, schema):
        return _Reader()

    def writer(self, schema, overwrite):
        return _Writer(self.options["path"])


def test_arrow_reader_and_writer_work_without_pandas(spark, tmp_path):
    spark.dataSource.register(_Source)
    rows = spark.read.format("smoke_arrow").load().orderBy("id").collect()
    assert [(r.id, r.s) for r in rows] == [
        (0, "a"), (1, None), (2, "c"), (10, "a"), (11, None), (12, "c"),
    ]  # fmt: skip
    out = tmp_path / "commit.txt"
    spark.range(5).selectExpr("id", "cast(id as string) s").repartition(2).write.format(
        "smoke_arrow"
    ).mode("append").option("path", str(out)).save()
    assert out.read_text() == "5 int64,string"
    # The driver never needed them; the workers share this interpreter.
    assert importlib.util.find_spec("pandas") is None
    assert importlib.util.find_spec("numpy") is None
