"""Spark through the "logcentric" data source against Spark's own Parquet, in one run.

A local cluster (`coordinator local-cluster`: 1 coordinator, 1 tablet server, WAL synced)
under a temporary folder and one SparkSession (default local[2]). The same cached DataFrame
of --rows rows (id long, n int, x double, s string, ts timestamp) is written to a table
through the data source (insert, one client session per task) and to Parquet with
`df.write.parquet`; then each is read in full with the `noop` sink (every column of every
row is materialised, no Parquet metadata shortcut), --repeats rounds of the three reads
interleaved, best time kept: the wall time of `write.format("noop").save()`, i.e.
planning (for the data source the planning worker's `partitions()`, a locations refresh
at the coordinator) and the job. The data source is read as a user reads it, with no
"partitions" option: its tablets are dealt into the session's defaultParallelism tasks
(captured by `register(spark)` in `build_session`), the number Spark packs Parquet's
files to (the ratio); and with one task per tablet (option partitions=0, printed too).
Then point reads through the data source: a key pinned by the "predicates" option (tablet
pruning: one task, one tablet) against the same row found by a predicate on a non-key
column (x = id / 2: every tablet scanned), --points keys each, p50.

    .venv/bin/python bench/spark.py [--rows 1000000] [--tablets 4] [--master local[2]]

Target (issue 25): reading through the data source within 1.2x of Parquet.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from logcentric.client import Client, Column  # noqa: E402
from logcentric.spark.session import build_session  # noqa: E402
from optools.localcluster import LocalCluster  # noqa: E402

COLUMNS = [
    Column("id", "int64", key=True),
    Column("n", "int32", nullable=True),
    Column("x", "double", nullable=True),
    Column("s", "string", nullable=True),
    Column("ts", "timestamp", nullable=True),
]


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--tablets", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--points", type=int, default=5, help="point reads of each kind")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    cluster = LocalCluster.create(work / "cluster", 1, 1, lease_timeout_s=1.5, secure=False)
    spark = None
    try:
        cluster.up(timeout_s=180)
        coords = ",".join(cluster.spec.coordinator_addresses)
        with Client(coords, timeout_s=60.0) as client:
            client.create_table("bench", COLUMNS, num_tablets=args.tablets)
        spark = build_session(args.master, "bench-spark")
        parts = max(2, args.tablets)
        df = (
            spark.range(0, args.rows, numPartitions=parts)
            .selectExpr(
                "id",
                "cast(id % 1000 as int) as n",
                "id * 0.5 as x",
                "concat('row-', cast(id as string)) as s",
                "timestamp_seconds(1700000000 + id) as ts",
            )
            .cache()
        )
        assert df.count() == args.rows
        parquet = str(work / "bench.parquet")

        write_table = timed(
            lambda: (
                df.write.format("logcentric")
                .option("coordinators", coords)
                .option("table", "bench")
                .option("operation", "insert")
                .mode("append")
                .save()
            )
        )
        write_parquet = timed(lambda: df.write.mode("overwrite").parquet(parquet))
        df.unpersist()

        # Spark packs Parquet's files into about defaultParallelism partitions; the data
        # source deals its tablets into as many tasks by default (no option). One task per
        # tablet (option partitions=0) is timed too.
        parallelism = spark.sparkContext.defaultParallelism
        per_tablet_df = (
            spark.read.format("logcentric")
            .option("coordinators", coords)
            .option("table", "bench")
            .option("partitions", "0")
            .load()
        )
        table_df = (
            spark.read.format("logcentric")
            .option("coordinators", coords)
            .option("table", "bench")
            .load()
        )
        parquet_df = spark.read.parquet(parquet)
        for d in (per_tablet_df, table_df, parquet_df):
            assert d.count() == args.rows
        parts_read = [d.rdd.getNumPartitions() for d in (per_tablet_df, table_df, parquet_df)]
        assert parts_read[0] == args.tablets, parts_read
        assert parts_read[1] == min(parallelism, args.tablets), (parts_read, parallelism)
        # Rounds interleave the three reads, so that a change of the machine's load during
        # the run falls on each of them alike; best of --repeats rounds for each.
        reads: dict[str, list[float]] = {"per_tablet": [], "table": [], "parquet": []}
        for _ in range(args.repeats):
            for name, d in (
                ("per_tablet", per_tablet_df),
                ("table", table_df),
                ("parquet", parquet_df),
            ):
                reads[name].append(
                    timed(lambda d=d: d.write.format("noop").mode("overwrite").save())
                )
        read_per_tablet, read_table, read_parquet = (
            min(reads[k]) for k in ("per_tablet", "table", "parquet")
        )

        def point_read(predicates: list) -> tuple[float, int]:
            df = (
                spark.read.format("logcentric")
                .option("coordinators", coords)
                .option("table", "bench")
                .option("predicates", json.dumps(predicates))
                .load()
            )
            got: list = []
            took = timed(lambda: got.extend(df.collect()))
            assert len(got) == 1, (predicates, got)
            return took, df.rdd.getNumPartitions()

        rng = random.Random(25)
        keys = [rng.randrange(args.rows) for _ in range(args.points)]
        by_key = [point_read([["id", "=", k]]) for k in keys]
        by_value = [point_read([["x", "=", k * 0.5]]) for k in keys]
        point_key = statistics.median(t for t, _ in by_key)
        point_value = statistics.median(t for t, _ in by_value)
        parts_key, parts_value = by_key[0][1], by_value[0][1]
    finally:
        if spark is not None:
            spark.stop()
        cluster.down()
        shutil.rmtree(work, ignore_errors=True)

    rows = args.rows
    print(f"{rows:,} rows, {args.tablets} tablets, master {args.master}, plaintext cluster")
    print(
        f"  read  table, 1 task/tablet: {read_per_tablet:6.2f} s  "
        f"{rows / read_per_tablet:>12,.0f} rows/s  {parts_read[0]} partitions (partitions=0)"
    )
    print(
        f"  read  table (data source): {read_table:7.2f} s  {rows / read_table:>12,.0f} rows/s"
        f"  {parts_read[1]} partitions (default: defaultParallelism {parallelism})"
    )
    print(
        f"  read  parquet:             {read_parquet:7.2f} s  {rows / read_parquet:>12,.0f} rows/s"
        f"  {parts_read[2]} partitions"
    )
    print(
        "  read rounds (s): "
        + "; ".join(f"{k} " + " ".join(f"{t:.3f}" for t in v) for k, v in reads.items())
    )
    print(f"  write table (data source): {write_table:7.2f} s  {rows / write_table:>12,.0f} rows/s")
    rate = rows / write_parquet
    print(f"  write parquet:             {write_parquet:7.2f} s  {rate:>12,.0f} rows/s")
    print(
        f"  point read by key (pruned):   p50 {point_key * 1000:7.1f} ms, "
        f"{parts_key} partition(s) of {args.tablets} tablets"
    )
    print(
        f"  point read by x = id / 2:     p50 {point_value * 1000:7.1f} ms, "
        f"{parts_value} partition(s) (every tablet)"
    )
    print(f"ratio read  table (default)/parquet: {read_table / read_parquet:.2f}x (target <= 1.2x)")
    print(f"ratio read  table, 1 task/tablet/parquet: {read_per_tablet / read_parquet:.2f}x")
    print(f"ratio write table/parquet: {write_table / write_parquet:.2f}x")
    print(f"ratio point read key/non-key: {point_key / point_value:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
