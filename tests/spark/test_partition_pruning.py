"""The data source plans only the tablets that its "predicates" option can match (the
client's tablet pruning), against a real local cluster; reads through Spark return what the
same predicates give on an unpruned scan of every tablet."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from logcentric.client import Client, Column
from logcentric.partition import bucket_of_key
from logcentric.spark.datasource import TableDataSource
from tests.spark.conftest import addresses, credentials_option

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TABLETS = 4
ROWS = 400
COLUMNS = [Column("id", "int64", key=True), Column("v", "string", nullable=True)]


@pytest.fixture(scope="module")
def table(cluster):
    with Client(addresses(cluster), timeout_s=60.0, credentials=cluster.credentials()) as client:
        client.create_table("pruned", COLUMNS, num_tablets=TABLETS)
        t = client.table("pruned")
        with client.new_session() as s:
            s.insert(t, [{"id": i, "v": None if i % 5 == 0 else f"v{i}"} for i in range(ROWS)])
        assert s.errors == []
        buckets = {x.tablet_id: x.hash_bucket for x in t.tablets()}
    return buckets


def _reader(cluster, predicates):
    source = TableDataSource(
        {
            "coordinators": addresses(cluster),
            **credentials_option(cluster),
            "table": "pruned",
            "predicates": json.dumps(predicates),
        }
    )
    return source.reader(source.schema())


def _bucket(k: int) -> int:
    return bucket_of_key([k], [pa.int64()], TABLETS)


def test_partitions_are_the_tablets_of_the_pinned_keys(cluster, table):
    """Without Spark in the way: the partitions the reader plans, and what they read."""
    for keys in ([7], [7, 8], [1, 2, 3, 250, 9999]):
        preds = [["id", "in", keys]] if len(keys) > 1 else [["id", "=", keys[0]]]
        reader = _reader(cluster, preds)
        partitions = reader.partitions()
        assert sorted(table[p.tablet_id] for p in partitions) == sorted({_bucket(k) for k in keys})
        rows = [r for p in partitions for b in reader.read(p) for r in b.to_pylist()]
        expected = [{"id": k, "v": None if k % 5 == 0 else f"v{k}"} for k in keys if k < ROWS]
        assert sorted(rows, key=lambda r: r["id"]) == expected
    # Not pinned: every tablet. Pinned to nothing: one tablet, no row.
    assert len(_reader(cluster, [["v", "=", "v7"]]).partitions()) == TABLETS
    assert len(_reader(cluster, [["id", ">=", 10]]).partitions()) == TABLETS
    reader = _reader(cluster, [["id", "=", 1], ["id", "=", 2]])
    (partition,) = reader.partitions()
    assert [b.num_rows for b in reader.read(partition) if b.num_rows] == []


def test_spark_reads_of_pinned_keys_match_spark_filtering(spark, cluster, table):
    full = (
        spark.read.format("logcentric")
        .option("coordinators", addresses(cluster))
        .options(**credentials_option(cluster))
        .option("table", "pruned")
        .load()
    )
    rng = random.Random(25)
    expected = sorted(full.collect())
    for _ in range(1):
        keys = [rng.randrange(-3, ROWS + 3) for _ in range(rng.randrange(1, 4))]
        low = rng.randrange(0, ROWS)
        for predicates, match in (
            ([["id", "in", keys]], lambda r, keys=keys: r.id in keys),
            ([["id", ">=", low], ["id", "<", low + 5]], lambda r, low=low: low <= r.id < low + 5),
        ):
            df = (
                spark.read.format("logcentric")
                .option("coordinators", addresses(cluster))
                .options(**credentials_option(cluster))
                .option("table", "pruned")
                .option("predicates", json.dumps(predicates))
                .load()
            )
            assert sorted(df.collect()) == [r for r in expected if match(r)], predicates
