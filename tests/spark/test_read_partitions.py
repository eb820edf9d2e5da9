"""The "partitions" option of the data source: the tablets a read plans (after pruning) are
dealt into at most that many Spark tasks, each scanning its tablets one after another, and
the rows read are exactly those of one task per tablet (design/spark.md, "Partitions").
Against a real local cluster and a local[2] SparkSession."""

from __future__ import annotations

import json

import pytest

from logcentric.client import Client, Column
from logcentric.spark.datasource import TableDataSource, deal_tablets
from logcentric.spark.mapping import OptionError, parse_options
from tests.spark.conftest import addresses, credentials_option

pytestmark = [pytest.mark.spark]

TABLETS = 5
ROWS = 500
COLUMNS = [
    Column("id", "int64", key=True),
    Column("v", "string", nullable=True),
    Column("n", "int32", nullable=True),
]


def _row(i: int) -> dict:
    return {"id": i, "v": None if i % 7 == 0 else f"v{i}", "n": i % 11}


def _by_id(row) -> int:
    return row.id


def test_deal_tablets_keeps_bucket_order_in_runs_of_near_equal_length():
    ids = [f"t{i}" for i in range(5)]
    assert deal_tablets(ids, 0) == [[t] for t in ids]
    assert deal_tablets(ids, 1) == [ids]
    assert deal_tablets(ids, 2) == [["t0", "t1"], ["t2", "t3", "t4"]]
    assert deal_tablets(ids, 3) == [["t0"], ["t1", "t2"], ["t3", "t4"]]
    assert deal_tablets(ids, 99) == [[t] for t in ids]
    assert deal_tablets(["t0"], 4) == [["t0"]]


@pytest.mark.parametrize("bad", ["-1", "two", "100001"])
def test_partitions_option_is_checked(bad):
    with pytest.raises(OptionError, match="partitions"):
        parse_options({"coordinators": "127.0.0.1:1", "table": "t", "partitions": bad})
    # Not given: None (the data source puts the session's default); 0: one task per tablet.
    assert parse_options({"coordinators": "127.0.0.1:1", "table": "t"}).partitions is None
    given = parse_options({"coordinators": "127.0.0.1:1", "table": "t", "partitions": "0"})
    assert given.partitions == 0


@pytest.fixture(scope="module")
def table(cluster):
    with Client(addresses(cluster), timeout_s=60.0, credentials=cluster.credentials()) as client:
        client.create_table("dealt", COLUMNS, num_tablets=TABLETS)
        t = client.table("dealt")
        with client.new_session() as s:
            s.insert(t, [_row(i) for i in range(ROWS)])
        assert s.errors == []
        return sorted(str(x.tablet_id) for x in t.tablets())


def _options(cluster, **more) -> dict:
    return {
        "coordinators": addresses(cluster),
        **credentials_option(cluster),
        "table": "dealt",
        **more,
    }


@pytest.mark.integration
def test_reader_deals_every_tablet_once_and_reads_every_row_once(cluster, table):
    for n in (1, 2, 3, TABLETS, TABLETS + 3):
        source = TableDataSource(_options(cluster, partitions=str(n)))
        reader = source.reader(source.schema())
        partitions = reader.partitions()
        assert len(partitions) == min(n, TABLETS)
        dealt = [tid for p in partitions for tid in p.tablet_ids]
        assert sorted(dealt) == table  # each tablet in exactly one partition
        rows = [r for p in partitions for b in reader.read(p) for r in b.to_pylist()]
        assert sorted(rows, key=lambda r: r["id"]) == [_row(i) for i in range(ROWS)], n
    # Pruning first, then dealing: a pinned key is still one task of one tablet.
    source = TableDataSource(
        _options(cluster, partitions="2", predicates=json.dumps([["id", "=", 42]]))
    )
    reader = source.reader(source.schema())
    (partition,) = reader.partitions()
    assert len(partition.tablet_ids) == 1
    assert [r for b in reader.read(partition) for r in b.to_pylist()] == [_row(42)]


@pytest.mark.integration
def test_spark_read_with_fewer_partitions_than_tablets(spark, cluster, table):
    per_tablet = spark.read.format("logcentric").options(**_options(cluster, partitions="0")).load()
    assert per_tablet.rdd.getNumPartitions() == TABLETS
    expected = sorted(per_tablet.collect(), key=_by_id)
    assert len(expected) == ROWS
    for n in (1, 2):
        df = spark.read.format("logcentric").options(**_options(cluster, partitions=str(n))).load()
        assert df.rdd.getNumPartitions() == n
        assert sorted(df.collect(), key=_by_id) == expected
        # Projection and Spark-side filters as with one task per tablet.
        got = sorted(df.where("n = 3").select("v", "id").collect(), key=_by_id)
        assert got == sorted(per_tablet.where("n = 3").select("v", "id").collect(), key=_by_id)
        assert len(got) == sum(1 for i in range(ROWS) if i % 11 == 3)
