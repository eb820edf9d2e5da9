"""Unit tests of the data source's pure parts: options, type mapping, filter translation,
batch shaping and error messages (no Spark session, no cluster)."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
)

from logcentric.client import RowError
from logcentric.spark import mapping
from logcentric.spark.mapping import Operation, OptionError

TABLE = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("i32", pa.int32()),
        pa.field("d", pa.float64()),
        pa.field("b", pa.bool_()),
        pa.field("s", pa.string()),
        pa.field("bin", pa.binary()),
        pa.field("ts", pa.timestamp("us")),
    ]
)


def test_options_defaults_and_errors():
    o = mapping.parse_options({"Coordinators": "127.0.0.1:1, 127.0.0.1:2", "table": "t"})
    assert o.coordinators == ("127.0.0.1:1", "127.0.0.1:2")
    assert o.table == "t" and o.operation is Operation.INSERT and o.columns is None
    assert o.predicates == "" and o.flush_rows_max == mapping.FLUSH_ROWS_DEFAULT
    o = mapping.parse_options(
        {
            "coordinators": "h:1",
            "table": "t",
            "operation": "UPSERT",
            "columns": "a, b",
            "predicates": '[["a", "=", 1]]',
            "flush_rows_max": "5",
            "timeout_s": "2.5",
        }
    )
    assert o.operation is Operation.UPSERT and o.columns == ("a", "b") and o.predicates
    assert o.flush_rows_max == 5 and o.timeout_s == 2.5
    bad = [
        ({"coordinators": "h:1", "cluster": "local", "table": "t"}, "not both"),
        ({"coordinators": "nohost", "table": "t"}, "host:port"),
        ({"coordinators": "h:1"}, "table"),
        ({"coordinators": "h:1", "table": "t", "operation": "merge"}, "insert|upsert|delete"),
        ({"coordinators": "h:1", "table": "t", "columns": "a,a"}, "twice"),
        ({"coordinators": "h:1", "table": "t", "pushdown": "true"}, "stale"),
        ({"coordinators": "h:1", "table": "t", "flush_rows_max": "0"}, "flush_rows_max"),
        ({"coordinators": "h:1", "table": "t", "timeout_s": "x"}, "timeout_s"),
        ({"coordinators": "h:1", "table": "t", "operaton": "upsert"}, 'unknown option "operaton"'),
        ({"coordinators": "h:1", "table": "t", "Colums": "a"}, 'unknown option "colums"'),
        ({"coordinators": "h:1", "table": "t", "path": "/x"}, r"load\(\) or save\(\)"),
    ]
    for options, text in bad:
        with pytest.raises(OptionError, match=text):
            mapping.parse_options(options)


def test_type_mapping_matches_what_spark_checks():
    schema = mapping.spark_schema(TABLE)
    assert [f.dataType for f in schema.fields] == [
        LongType(),
        IntegerType(),
        DoubleType(),
        BooleanType(),
        StringType(),
        BinaryType(),
        TimestampType(),
    ]
    assert [f.nullable for f in schema.fields] == [f.nullable for f in TABLE]
    # Spark compares yielded batches with this exact schema (nullability included).
    assert mapping.spark_batch_schema(TABLE).equals(to_arrow_schema(schema, timezone="UTC"))
    with pytest.raises(ValueError, match="no Spark type"):
        mapping.spark_type(pa.int16())


def test_projection():
    assert mapping.project(TABLE, None) is TABLE
    assert mapping.project(TABLE, ["s", "id"]).names == ["s", "id"]
    with pytest.raises(OptionError, match="unknown column"):
        mapping.project(TABLE, ["nope"])


def _batch() -> pa.RecordBatch:
    ts = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456)
    return pa.RecordBatch.from_pylist(
        [
            {"id": 1, "i32": 2, "d": 1.5, "b": True, "s": "x", "bin": b"\x00", "ts": ts},
            {"id": 2, "i32": None, "d": None, "b": None, "s": None, "bin": None, "ts": None},
        ],
        schema=TABLE,
    )


def test_batches_round_trip_between_table_and_spark_shapes():
    batch = _batch()
    target = mapping.spark_batch_schema(mapping.project(TABLE, ["ts", "id"]))
    spark_batch = mapping.to_spark_batch(batch, target)
    assert spark_batch.schema.equals(target)
    assert spark_batch.column(0).type == pa.timestamp("us", tz="UTC")
    back = mapping.to_table_batch(
        mapping.to_spark_batch(batch, mapping.spark_batch_schema(TABLE)), TABLE
    )
    assert back.to_pylist() == batch.to_pylist()
    # Spark hands longs where the table has int32: cast; a column with a value that does
    # not fit is left as it is, for the session to refuse that row alone.
    fits = pa.RecordBatch.from_pydict({"id": [1], "i32": pa.array([2], pa.int64())})
    assert mapping.to_table_batch(fits, TABLE).schema.field("i32").type == pa.int32()
    wide = pa.RecordBatch.from_pydict({"id": [1, 2], "i32": pa.array([2, 2**40], pa.int64())})
    assert mapping.to_table_batch(wide, TABLE).column(1).to_pylist() == [2, 2**40]
    with pytest.raises(OptionError, match="not in the table"):
        mapping.to_table_batch(pa.RecordBatch.from_pydict({"zz": [1]}), TABLE)


def test_check_write_columns():
    keys = ["id"]
    mapping.check_write_columns(["id", "s"], TABLE, keys, Operation.UPSERT)
    mapping.check_write_columns(["id"], TABLE, keys, Operation.DELETE)
    with pytest.raises(OptionError, match="not in the table"):
        mapping.check_write_columns(["id", "zz"], TABLE, keys, Operation.INSERT)
    with pytest.raises(OptionError, match="key column"):
        mapping.check_write_columns(["s"], TABLE, keys, Operation.DELETE)


def test_predicates_option():
    text = (
        '[["id", ">=", 10], ["d", "=", 2], ["s", "in", ["a", "b"]], ["i32", "is null"],'
        ' ["b", "=", true], ["ts", "<", "2024-01-02T00:00:00+01:00"], ["s", "IS NOT NULL", null]]'
    )
    assert mapping.parse_predicates(text, TABLE) == [
        ("id", ">=", 10),
        ("d", "=", 2.0),
        ("s", "in", ["a", "b"]),
        ("i32", "is null", None),
        ("b", "=", True),
        ("ts", "<", datetime.datetime(2024, 1, 1, 23, 0)),
        ("s", "is not null", None),
    ]
    assert mapping.parse_predicates("[]", TABLE) == []
    bad = [
        ("{", "not JSON"),
        ('{"id": 1}', "list"),
        ('[["nope", "=", 1]]', "unknown column"),
        ('[["id", "~", 1]]', "unknown op"),
        ('[["id", "=", "1"]]', "does not fit"),
        ('[["id", "=", true]]', "does not fit"),
        ('[["bin", "=", "x"]]', "does not fit"),
        ('[["ts", "=", "yesterday"]]', "does not fit"),
        ('[["id", "in", []]]', "in takes"),
        ('[["id", "="]]', "needs a value"),
        ('[["id", "is null", 3]]', "takes no value"),
        ('[["id"]]', "column, op"),
    ]
    for text, message in bad:
        with pytest.raises(OptionError, match=message):
            mapping.parse_predicates(text, TABLE)


def test_row_error_message_names_count_and_first_errors():
    errs = [
        RowError("insert", {"id": i, "s": "x" * 100}, "ALREADY_EXISTS", "key exists")
        for i in range(7)
    ]
    text = mapping.format_row_errors(errs, "t", Operation.INSERT)
    assert text.startswith("7 row(s) failed to insert into table 't'")
    assert "ALREADY_EXISTS: key exists" in text and "(and 2 more)" in text
    assert "x" * 41 not in text


def test_the_cluster_is_named_as_everywhere_else_and_resolved_on_the_driver(tmp_path, monkeypatch):
    """Option "cluster" (or the environment, or the clusters file's default) becomes the
    coordinators' addresses when the source is defined: readers and writers pickled to
    executors carry addresses, not a name their hosts could not look up."""
    from logcentric import clusters
    from logcentric.spark.datasource import _resolve_cluster

    monkeypatch.setenv("LOGCENTRIC_CONFIG", str(tmp_path / "clusters.toml"))
    monkeypatch.delenv("LOGCENTRIC_COORDINATORS", raising=False)
    monkeypatch.delenv("LOGCENTRIC_CLUSTER", raising=False)
    unnamed = mapping.parse_options({"table": "t"})
    assert unnamed.coordinators == () and unnamed.cluster == ""
    with pytest.raises(OptionError, match='option "coordinators".*or option "cluster"'):
        _resolve_cluster(unnamed)

    clusters.register("demo", ["127.0.0.1:7001", "127.0.0.1:7002"])
    named = _resolve_cluster(mapping.parse_options({"cluster": "demo", "table": "t"}))
    assert named.coordinators == ("127.0.0.1:7001", "127.0.0.1:7002") and named.cluster == ""
    assert _resolve_cluster(unnamed).coordinators == named.coordinators  # the default
    with pytest.raises(OptionError, match="'nope'.*known: demo"):
        _resolve_cluster(mapping.parse_options({"cluster": "nope", "table": "t"}))
    monkeypatch.setenv("LOGCENTRIC_COORDINATORS", "127.0.0.1:7009")
    assert _resolve_cluster(unnamed).coordinators == ("127.0.0.1:7009",)
    given = mapping.parse_options({"coordinators": "127.0.0.1:7005", "table": "t"})
    assert _resolve_cluster(given).coordinators == ("127.0.0.1:7005",)
