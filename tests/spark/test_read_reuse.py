"""A Spark read's tasks share their Python worker's client: a real job on local[2] against a
real local cluster reads every row of a table of many tablets once, and the coordinator is
asked for the table (DescribeTable, GetTabletLocations) by the planning and by each worker's
first task, not by every task (a client per task looked the table up every time:
design/spark.md, Speed)."""

from __future__ import annotations

import pytest

from logcentric.client import Client, Column
from tests.metrics.support import scrape, value
from tests.spark.conftest import addresses, credentials_option

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TABLETS = 8
ROWS = 3000
COLUMNS = [Column("id", "int64", key=True), Column("v", "string", nullable=True)]
LOOKUPS = ("Coordinator.DescribeTable", "Coordinator.GetTabletLocations")


def _lookups(cluster) -> dict[str, float]:
    """Table lookups the (single) coordinator answered so far, by method."""
    (node,) = cluster.spec.coordinators
    fams = scrape(f"http://{node.http}")
    return {m: value(fams, "logcentric_rpc_calls", method=m) for m in LOOKUPS}


def _diff(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {m: after[m] - before[m] for m in LOOKUPS}


def test_every_row_once_and_no_table_lookup_per_task(spark, cluster):
    with Client(addresses(cluster), timeout_s=60.0, credentials=cluster.credentials()) as client:
        client.create_table("reused", COLUMNS, num_tablets=TABLETS)
        t = client.table("reused")
        with client.new_session() as s:
            s.insert(t, [{"id": i, "v": f"v{i}"} for i in range(ROWS)])
        assert s.errors == []
    loaded = _lookups(cluster)
    df = (
        spark.read.format("logcentric")
        .option("coordinators", addresses(cluster))
        .options(**credentials_option(cluster))
        .option("table", "reused")
        .option("partitions", "0")  # one task per tablet: a lookup per task would show
        .load()
    )
    assert df.rdd.getNumPartitions() == TABLETS
    # The metric counts these calls: the load looked the table up (its schema).
    assert all(n >= 1 for n in _diff(loaded, _lookups(cluster)).values())
    for query in range(2):
        before = _lookups(cluster)
        rows = df.collect()
        after = _lookups(cluster)
        assert sorted(r.id for r in rows) == list(range(ROWS)), query
        assert all(r.v == f"v{r.id}" for r in rows)
        calls = _diff(before, after)
        # The DataFrame's partitions were planned above; a worker's first task makes its
        # client and looks the table up; a client per task made TABLETS of each per query.
        assert all(n < TABLETS for n in calls.values()), (query, calls)
