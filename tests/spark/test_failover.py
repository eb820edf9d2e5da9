"""A coordinator leader failover during Spark write jobs (3 coordinators, 2 tablet servers):
the leader is killed with SIGKILL while an upsert job runs, and between the ingest slices of
the pipeline; afterwards every row is in its table exactly once with its written values."""

from __future__ import annotations

import threading
import time

import pytest

from jobs.pipeline import run_pipeline
from logcentric.client import Client, Column
from tests.spark.conftest import (
    CLUSTER_UP_TIMEOUT_S,
    addresses,
    credentials_option,
    credentials_path,
    start_cluster,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROWS = 60_000
KILL_WAIT_S = 120.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from start_cluster(tmp_path_factory.mktemp("cluster3"), 3, 2)


@pytest.fixture
def whole_cluster(cluster):
    """The cluster; the killed coordinator is restarted after the test (a majority of the
    three must stay up for the next test's failover)."""
    yield cluster
    cluster.up(timeout_s=CLUSTER_UP_TIMEOUT_S)


def kill_leader(cluster) -> str:
    """SIGKILL the serving coordinator leader; returns its name."""
    with cluster.client(timeout_s=10.0) as meta:
        deadline = time.monotonic() + KILL_WAIT_S
        while (leader := cluster.leader(meta)) is None:
            assert time.monotonic() < deadline, "no coordinator leader to kill"
            time.sleep(0.1)
    cluster.kill(leader)
    return leader.name


def test_leader_killed_during_an_upsert_job_loses_and_duplicates_nothing(spark, whole_cluster):
    cluster = whole_cluster
    coords = addresses(cluster)
    with Client(coords, timeout_s=60.0, credentials=cluster.credentials()) as client:
        client.create_table(
            "failover",
            [Column("k", "int64", key=True), Column("v", "string"), Column("n", "int64")],
            num_tablets=4,
        )
    df = spark.range(0, ROWS, numPartitions=4).selectExpr(
        "id as k", "concat('v', cast(id as string)) as v", "id * 3 as n"
    )
    killed: list[str] = []
    during: list[bool] = []  # whether the write job was still running after the kill
    errors: list[BaseException] = []
    write_started = threading.Event()

    def killer() -> None:
        try:
            tracker = spark.sparkContext.statusTracker()
            deadline = time.monotonic() + KILL_WAIT_S
            while not tracker.getActiveJobsIds():  # the write job's tasks are running
                if write_started.is_set() and time.monotonic() > deadline:
                    return
                time.sleep(0.05)
            killed.append(kill_leader(cluster))
            during.append(bool(tracker.getActiveJobsIds()))
        except BaseException as err:  # noqa: BLE001 - checked by the test
            errors.append(err)

    thread = threading.Thread(target=killer, name="leader-killer")
    thread.start()
    try:
        write_started.set()
        (
            df.write.format("logcentric")
            .option("coordinators", coords)
            .options(**credentials_option(cluster))
            .option("table", "failover")
            .option("operation", "upsert")
            .option("flush_rows_max", "2000")
            .mode("append")
            .save()
        )
    finally:
        thread.join(KILL_WAIT_S)
    assert not errors, errors
    assert killed and during == [True], "the leader was not killed during the write job"
    read = (
        spark.read.format("logcentric")
        .option("coordinators", coords)
        .options(**credentials_option(cluster))
        .option("table", "failover")
        .load()
    )
    assert read.count() == ROWS
    assert read.select("k").distinct().count() == ROWS
    assert read.exceptAll(df).count() == 0 and df.exceptAll(read).count() == 0


def test_pipeline_with_a_failover_in_the_middle_of_the_ingest(spark, whole_cluster, tmp_path):
    cluster = whole_cluster
    killed: list[str] = []
    result = run_pipeline(
        spark,
        addresses(cluster),
        tmp_path,
        rows=20_000,
        on_ingest_midpoint=lambda: killed.append(kill_leader(cluster)),
        table_prefix="pipe_",
        credentials=credentials_path(cluster),
    )
    assert len(killed) == 1
    assert result.ok, result
    assert result.rows_ingested == 20_000 and result.duplicate_keys == 0
    assert result.missing_keys == 0 and result.aggregate_matches_source
