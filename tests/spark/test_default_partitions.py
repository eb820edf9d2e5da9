"""The default number of read tasks is the session's defaultParallelism (design/spark.md,
"Partitions"): `register(spark)` (called by `build_session`) captures it on the driver in a
subclass of the data source, which cloudpickle ships by value to the planning worker where
`partitions()` runs. The "partitions" option wins; 0 is one task per tablet. Against a real
local cluster and a real local[2] SparkSession (its planning and read workers are other
processes than this one)."""

from __future__ import annotations

import pytest

from logcentric.client import Client, Column
from logcentric.spark.datasource import TableDataSource
from logcentric.spark.mapping import OptionError
from tests.spark.conftest import addresses, credentials_option

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TABLETS = 5
ROWS = 400
COLUMNS = [Column("id", "int64", key=True), Column("v", "string", nullable=True)]


@pytest.fixture(scope="module")
def table(cluster):
    with Client(addresses(cluster), timeout_s=60.0, credentials=cluster.credentials()) as client:
        client.create_table("defaulted", COLUMNS, num_tablets=TABLETS)
        t = client.table("defaulted")
        with client.new_session() as s:
            s.insert(t, [{"id": i, "v": f"v{i}"} for i in range(ROWS)])
        assert s.errors == []
    return "defaulted"


def _options(cluster, **more) -> dict:
    return {
        "coordinators": addresses(cluster),
        **credentials_option(cluster),
        "table": "defaulted",
        **more,
    }


def _load(spark, cluster, **more):
    return spark.read.format("logcentric").options(**_options(cluster, **more)).load()


def _rows(df) -> list[tuple[int, str]]:
    return sorted((r.id, r.v) for r in df.collect())


EXPECTED = [(i, f"v{i}") for i in range(ROWS)]


def test_default_is_the_sessions_parallelism_and_the_option_wins(spark, cluster, table):
    parallelism = spark.sparkContext.defaultParallelism
    assert 1 <= parallelism < TABLETS  # local[2]: 2 tasks for 5 tablets
    default = _load(spark, cluster)
    assert default.rdd.getNumPartitions() == parallelism
    assert _rows(default) == EXPECTED
    # An explicit N wins, below and above the default.
    for n in (1, 3):
        given = _load(spark, cluster, partitions=str(n))
        assert given.rdd.getNumPartitions() == n
        assert _rows(given) == EXPECTED
    # 0: one task per tablet (the old default).
    per_tablet = _load(spark, cluster, partitions="0")
    assert per_tablet.rdd.getNumPartitions() == TABLETS
    assert _rows(per_tablet) == EXPECTED
    # A Spark-side filter and projection read the same rows either way.
    assert sorted(default.where("id % 7 = 3").select("v").collect()) == sorted(
        per_tablet.where("id % 7 = 3").select("v").collect()
    )


def test_register_again_sets_another_default(spark, cluster, table):
    from logcentric.spark.datasource import register

    try:
        register(spark, partitions=4)
        df = _load(spark, cluster)
        assert df.rdd.getNumPartitions() == 4
        assert _rows(df) == EXPECTED
        register(spark, partitions=0)
        assert _load(spark, cluster).rdd.getNumPartitions() == TABLETS
        with pytest.raises(OptionError, match="default partitions"):
            register(spark, partitions=-1)
    finally:
        register(spark)
    assert _load(spark, cluster).rdd.getNumPartitions() == spark.sparkContext.defaultParallelism


def test_the_class_found_by_name_keeps_one_task_per_tablet(cluster):
    """`pyspark_logcentric.DefaultSource` (no register, no session known): the base class's
    default is 0, one task per tablet; a registered subclass carries its own."""
    from logcentric.spark.datasource import source_class

    base = TableDataSource(_options(cluster))
    assert base._parsed.partitions == 0
    assert len(base.reader(base.schema()).partitions()) == TABLETS
    sub = source_class(3)
    assert sub(_options(cluster))._parsed.partitions == 3
    assert sub(_options(cluster, partitions="1"))._parsed.partitions == 1
    assert sub(_options(cluster, partitions="0"))._parsed.partitions == 0
    for bad in ("-1", "many"):
        with pytest.raises(OptionError, match="one task per tablet"):
            sub(_options(cluster, partitions=bad))
