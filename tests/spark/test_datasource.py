"""The "logcentric" data source on local[2] against a real local cluster (1 coordinator,
1 tablet server): every column type with nulls, reads during writes, predicates and
projection against Spark's own filtering (reused DataFrames included), write modes and
failed writes."""

from __future__ import annotations

import datetime
import threading

import pyarrow as pa
import pytest

from logcentric.client import Client, Column
from logcentric.spark.datasource import TableDataSource
from tests.spark.conftest import addresses, credentials_option

pytestmark = [pytest.mark.spark, pytest.mark.integration]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"
ALL_TYPES = [
    Column("id", "int64", key=True),
    Column("i32", "int32", nullable=True),
    Column("d", "double", nullable=True),
    Column("b", "bool", nullable=True),
    Column("s", "string", nullable=True),
    Column("bin", "binary", nullable=True),
    Column("ts", "timestamp", nullable=True),
]
SPARK_SCHEMA = "id long, i32 int, d double, b boolean, s string, bin binary, ts timestamp"
ROWS = 600
EPOCH = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)


def sample_row(i: int) -> tuple:
    """Row i, with a null in each nullable column for some i, NaN and negative values too."""
    return (
        i,
        None if i % 3 == 0 else (i * 7919) % 1000 - 500,
        None if i % 4 == 0 else (float("nan") if i % 50 == 1 else (i % 97) / 4.0 - 5.0),
        None if i % 5 == 0 else i % 2 == 0,
        None if i % 6 == 0 else f"s{i % 37:02d}-é",
        None if i % 7 == 0 else bytes([i % 256, (i * 3) % 256]),
        None if i % 8 == 0 else EPOCH + datetime.timedelta(seconds=i * 3601, microseconds=i),
    )


def _options(reader, cluster, table: str):
    return (
        reader.format("logcentric")
        .option("coordinators", addresses(cluster))
        .option("table", table)
        .options(**credentials_option(cluster))
    )


def _read(spark, cluster, table: str, **options):
    reader = _options(spark.read, cluster, table)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _write(df, cluster, table: str, operation: str = "insert") -> None:
    _options(df.write, cluster, table).option("operation", operation).mode("append").save()


def _rows(df) -> list[tuple]:
    """Rows as comparable tuples (NaN made equal to itself, None ordered first)."""

    def norm(v):
        if isinstance(v, float) and v != v:
            return ("nan",)
        return (0,) if v is None else (1, v)

    return sorted(tuple(norm(v) for v in r) for r in df.collect())


@pytest.fixture(scope="module")
def client(cluster):
    with Client(addresses(cluster), timeout_s=60.0, credentials=cluster.credentials()) as c:
        yield c


@pytest.fixture(scope="module")
def all_types(spark, cluster, client):
    """A table of every column type, written through the data source."""
    client.create_table("all_types", ALL_TYPES, num_tablets=3)
    source = spark.createDataFrame([sample_row(i) for i in range(ROWS)], SPARK_SCHEMA)
    _write(source.repartition(3), cluster, "all_types")
    return source


def test_round_trip_of_every_type_with_nulls(spark, cluster, client, all_types):
    df = _read(spark, cluster, "all_types")
    assert df.schema.simpleString() == (
        "struct<id:bigint,i32:int,d:double,b:boolean,s:string,bin:binary,ts:timestamp>"
    )
    assert [f.nullable for f in df.schema.fields] == [False] + [True] * 6
    # 3 tablets dealt into the session's defaultParallelism (2 on local[2]) tasks.
    assert df.rdd.getNumPartitions() == min(3, spark.sparkContext.defaultParallelism)
    assert _rows(df) == _rows(all_types)
    # The same rows through the client alone, so the comparison is not Spark against itself.
    table = client.table("all_types").to_arrow()
    assert table.num_rows == ROWS
    by_id = {r["id"]: r for r in table.to_pylist()}
    for i in (0, 1, 2, 7, 8, 51):
        expected = sample_row(i)
        got = by_id[i]
        assert got["i32"] == expected[1] and got["b"] == expected[3]
        assert got["s"] == expected[4] and got["bin"] == expected[5]
        want_ts = None if expected[6] is None else expected[6].replace(tzinfo=None)
        assert got["ts"] == want_ts
        d = got["d"]
        assert (d != d and expected[2] != expected[2]) or d == expected[2]


def test_columns_option_projects_in_the_scan(spark, cluster, all_types):
    df = _read(spark, cluster, "all_types", columns="s,id")
    assert df.columns == ["s", "id"]
    assert _rows(df) == _rows(all_types.select("s", "id"))
    with pytest.raises(Exception, match="unknown column"):
        _read(spark, cluster, "all_types", columns="nope").collect()


FILTERS = [
    "id = 17",
    "id > 500",
    "id >= 10 and id < 40",
    "id in (1, 5, 9, 1000)",
    "i32 is null",
    "i32 is not null and i32 <= -400",
    "b = true and s is not null",
    "s = 's05-é'",
    "s >= 's30' and id < 300",
    "bin = X'0A1E'",
    "d = -2.5",
    "d > 0",  # NaN counts as greater in Spark: must not be pushed
    "d is null or id = 3",
    "not (id > 10)",
    "s like 's1%'",
    "ts > timestamp'2024-01-10 00:00:00'",
]


@pytest.mark.parametrize("conf", ["true", "false"])
def test_spark_filters_on_the_table_match_spark_filtering(spark, cluster, all_types, conf):
    """Spark's filters (evaluated by Spark; the reader has no pushFilters), with the pushdown
    conf on and off, on one reused DataFrame."""
    spark.conf.set(PUSHDOWN_CONF, conf)
    try:
        table = _read(spark, cluster, "all_types")
        for expr in FILTERS:
            got = table.where(expr).select("id", "s", "d")
            expected = all_types.where(expr).select("id", "s", "d")
            assert _rows(got) == _rows(expected), expr
            assert table.count() == ROWS, expr  # no filter: nothing stale may apply
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


# (predicates option, the same condition in Spark SQL, columns option)
SCAN_CASES = [
    ('[["id", "=", 17]]', "id = 17", "id,s"),
    ('[["id", ">=", 10], ["id", "<", 40]]', "id >= 10 and id < 40", "s,id,d"),
    ('[["id", "in", [1, 5, 9, 1000]]]', "id in (1, 5, 9, 1000)", None),
    ('[["i32", "is null"]]', "i32 is null", "id"),
    ('[["i32", "is not null"], ["i32", "<=", -400]]', "i32 <= -400", "id,i32"),
    ('[["b", "=", true], ["s", "is not null"]]', "b = true and s is not null", "id"),
    ('[["s", "=", "s05-é"]]', "s = 's05-é'", "id,bin"),
    ('[["s", ">=", "s30"], ["id", "<", 300]]', "s >= 's30' and id < 300", "s"),
    ('[["d", "=", -2.5]]', "d = -2.5", "id,d"),
    ('[["ts", ">", "2024-01-10T00:00:00+00:00"]]', "ts > timestamp'2024-01-10 00:00:00'", "id"),
]


def test_scan_predicates_and_projection_match_spark_filtering(spark, cluster, all_types):
    """The predicates and columns options, applied by the tablet servers, give the rows that
    Spark's own filter and select give; Spark filters on top still apply."""
    for predicates, expr, columns in SCAN_CASES:
        options = {"predicates": predicates}
        if columns:
            options["columns"] = columns
        df = _read(spark, cluster, "all_types", **options)
        names = columns.split(",") if columns else all_types.columns
        assert df.columns == names, predicates
        assert _rows(df) == _rows(all_types.where(expr).select(*names)), predicates
        more = f"{names[0]} is not null"  # a Spark filter on top of the scan predicates
        assert _rows(df.where(more)) == _rows(all_types.where(expr).select(*names).where(more))


def test_scan_predicates_reach_the_tablet_servers(cluster, all_types):
    """Without Spark in the way: the reader Spark plans scans only the matching rows."""
    source = TableDataSource(
        {
            "coordinators": addresses(cluster),
            **credentials_option(cluster),
            "table": "all_types",
            "predicates": '[["id", "in", [17, 18, 19, 9999]], ["s", "is not null"]]',
            "columns": "s,id",
        }
    )
    reader = source.reader(source.schema())
    partitions = reader.partitions()
    assert len(partitions) == 2  # the buckets of 17, 18, 19 and 9999 (of 3): tablet pruning
    rows = [r for p in partitions for b in reader.read(p) for r in b.to_pylist()]
    assert sorted(rows, key=lambda r: r["id"]) == [
        {"s": "s17-é", "id": 17},
        {"s": "s19-é", "id": 19},  # 18 has a null s
    ]


def test_bad_predicates_option_fails_before_any_task(spark, cluster, all_types):
    with pytest.raises(Exception, match="does not fit"):
        _read(spark, cluster, "all_types", predicates='[["id", "=", "x"]]').count()
    with pytest.raises(Exception, match="stale"):
        _read(spark, cluster, "all_types", pushdown="true").count()
    # A misspelt option is refused, not ignored (a full scan, or an insert for an upsert).
    with pytest.raises(Exception, match='unknown option "colums"'):
        _read(spark, cluster, "all_types", colums="id").count()
    df = spark.createDataFrame([(1,)], "id long")
    with pytest.raises(Exception, match='unknown option "operaton"'):
        _options(df.write, cluster, "all_types").option("operaton", "upsert").mode("append").save()


def test_upsert_and_delete(spark, cluster, client):
    client.create_table(
        "modes", [Column("k", "int64", key=True), Column("v", "string", nullable=True)]
    )
    base = spark.createDataFrame([(i, f"v{i}") for i in range(100)], "k long, v string")
    _write(base, cluster, "modes", "insert")
    changed = spark.createDataFrame([(i, f"w{i}") for i in range(50, 150)], "k long, v string")
    _write(changed, cluster, "modes", "upsert")
    gone = spark.createDataFrame([(i,) for i in range(0, 150, 3)], "k long")
    _write(gone, cluster, "modes", "delete")
    got = {r.k: r.v for r in _read(spark, cluster, "modes").collect()}
    expected = {i: (f"v{i}" if i < 50 else f"w{i}") for i in range(150) if i % 3}
    assert got == expected


def test_write_with_a_bad_row_fails_clearly(spark, cluster, client):
    client.create_table(
        "strict", [Column("k", "int64", key=True), Column("v", "string", nullable=True)]
    )
    _write(spark.createDataFrame([(1, "a"), (2, "b")], "k long, v string"), cluster, "strict")
    bad = spark.createDataFrame([(3, "c"), (2, "dup"), (4, "d")], "k long, v string")
    with pytest.raises(Exception) as info:
        _write(bad.coalesce(1), cluster, "strict", "insert")
    text = str(info.value)
    assert "1 row(s) failed to insert into table 'strict'" in text, text
    assert "ALREADY_EXISTS" in text and "'k': 2" in text, text
    # Rows of the failed task that were fine were written: there is no rollback.
    assert {r.k for r in _read(spark, cluster, "strict").collect()} == {1, 2, 3, 4}

    # A value its column cannot hold, a null where none may be: those rows are named, the
    # task fails, the task's other rows are written.
    client.create_table("narrow", [Column("k", "int64", key=True), Column("n", "int32")])
    odd = spark.createDataFrame([(1, 5), (2, 2**40), (3, None), (4, 7)], "k long, n long")
    with pytest.raises(Exception) as info:
        _write(odd.coalesce(1), cluster, "narrow", "insert")
    text = str(info.value)
    assert "2 row(s) failed to insert into table 'narrow'" in text, text
    assert "'k': 2" in text and "not in range" in text, text
    assert "'k': 3" in text and "column 'n' is null" in text, text
    assert {r.k for r in _read(spark, cluster, "narrow").collect()} == {1, 4}

    with pytest.raises(Exception, match="not in the table"):
        _write(spark.createDataFrame([(9, 1)], "k long, zz int"), cluster, "strict")
    with pytest.raises(Exception, match="lacks key column"):
        _write(spark.createDataFrame([("x",)], "v string"), cluster, "strict", "upsert")
    with pytest.raises(Exception, match="overwrite"):
        _options(spark.createDataFrame([(9, "x")], "k long, v string").write, cluster, "strict") \
            .mode("overwrite").save()  # fmt: skip
    with pytest.raises(Exception, match="(?i)not.?found"):
        _read(spark, cluster, "no_such_table").count()


def test_read_during_writes(spark, cluster, client):
    """Scans while a writer adds rows: every scan returns whole rows that were written, at
    least all rows acknowledged before the scan started and at most those written by its end."""
    client.create_table(
        "growing", [Column("k", "int64", key=True), Column("v", "int64")], num_tablets=2
    )
    batch_rows, batches = 100, 2000  # a bound; the writer is stopped after the scans
    acked = [0]
    stop = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            with Client(addresses(cluster), timeout_s=60.0, credentials=cluster.credentials()) as c:
                t = c.table("growing")
                for n in range(batches):
                    if stop.wait(0.01):  # paced, so that it outlives a few Spark scans
                        return
                    ks = list(range(n * batch_rows, (n + 1) * batch_rows))
                    rows = pa.table({"k": pa.array(ks, pa.int64()),
                                     "v": pa.array([k * 2 for k in ks], pa.int64())})  # fmt: skip
                    with c.new_session() as s:
                        s.insert(t, rows)
                        assert not s.flush()
                    acked[0] = (n + 1) * batch_rows
        except BaseException as err:  # noqa: BLE001 - reported by the test below
            failures.append(err)

    df = _read(spark, cluster, "growing")
    thread = threading.Thread(target=writer, name="growing-writer")
    thread.start()
    seen = []
    try:
        while thread.is_alive() and len(seen) < 4:
            before = acked[0]
            rows = df.collect()
            after = acked[0] if thread.is_alive() else batches * batch_rows
            keys = [r.k for r in rows]
            assert len(keys) == len(set(keys))
            assert all(r.v == r.k * 2 for r in rows)
            assert before <= len(keys) <= after + batch_rows, (before, len(keys), after)
            assert set(range(before)) <= set(keys)
            seen.append(len(keys))
    finally:
        stop.set()
        thread.join(120)
    assert not failures, failures
    assert len(seen) >= 2, f"only {len(seen)} scans ran while the writer was writing"
    assert seen == sorted(seen)
    final = _read(spark, cluster, "growing").count()
    assert final == acked[0]
