"""The data pipeline job: sample orders -> table -> Spark aggregation -> second table.

    python -m jobs.pipeline [--cluster NAME | --coordinators H:P,...] [--credentials FILE]
                            [--master URL] [--rows N]
    spark-submit --master spark://HOST:7077 jobs/pipeline.py --cluster NAME

The cluster is named as everywhere else (`logcentric.clusters`: --coordinators, --cluster,
LOGCENTRIC_COORDINATORS, the clusters file's default), resolved once on the driver, and so
is its credentials file (CURVE as its principal: --credentials, else LOGCENTRIC_CREDENTIALS,
else the named cluster's `credentials` entry in the clusters file; none: plaintext), given to
the client library and to the data source as its option `credentials`. The
Spark master is spark-submit's (or the `spark.master` conf's) unless --master is given;
with neither, Spark's default local[*].

1. Generate a sample dataset of orders with Spark and write it as Parquet under --workdir
   (nothing is downloaded; the values are a deterministic function of the order id).
2. Ingest the Parquet rows into the table `<prefix>orders` through the "logcentric" data
   source, in several write jobs (slices of the order ids) in upsert mode. Between two slices
   in the middle, `on_ingest_midpoint` runs: the main job kills the coordinator leader there.
   A slice whose write job fails is written again (upsert makes that safe), a bounded
   number of times.
3. Read the table back with Spark (the tablets dealt into the session's defaultParallelism
   tasks, design/spark.md "Partitions") and check that it holds exactly the generated keys,
   each once.
4. Transform and aggregate in Spark: revenue per region and day for non-cancelled orders.
5. Write the aggregate to `<prefix>region_daily` (upsert), read it back, and compare it
   with the same aggregate computed from the Parquet file alone.
6. Print a summary: counts in and out, sample rows, and whether every check passed.

Started from Python (not spark-submit), the driver's JVM writes its own output (Spark's
log, Java stack traces) to `<workdir>/spark-driver.log`, said at the start. Ctrl-C ends the
job with one line (`pipeline: interrupted`) and exit status 130: the session's stop is
bounded, then the JVM it started and its Python workers are ended.

`run_pipeline(spark, coordinators, workdir, rows=..., on_ingest_midpoint=callback,
credentials=path)` is the entry point for other jobs; it returns a PipelineResult and raises
PipelineError when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("pipeline")

FORMAT = "logcentric"
ROWS_DEFAULT = 100_000
INGEST_SLICES_DEFAULT = 4
SLICE_ATTEMPTS_MAX = 5
NUM_TABLETS_DEFAULT = 4
SAMPLE_ROWS = 5
REGIONS = ("north", "south", "east", "west", "central")
DAYS = 14
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl-C
SPARK_STOP_S = 20.0  # Ctrl-C: how long SparkSession.stop() may take before the JVM is ended
JVM_EXIT_S = 10.0  # then how long the JVM has after SIGTERM before SIGKILL
SPARK_LOG = "spark-driver.log"  # in --workdir: the JVM's own output, when this job starts it


class PipelineError(RuntimeError):
    """A step of the pipeline failed or a check found wrong data."""


@dataclass(frozen=True, slots=True)
class PipelineResult:
    rows_generated: int
    rows_ingested: int  # rows read back from the orders table
    duplicate_keys: int
    missing_keys: int
    slice_retries: int
    groups_computed: int  # aggregate rows computed from the cluster's table
    groups_read_back: int  # aggregate rows read back from the result table
    aggregate_matches_source: bool
    orders_table: str
    result_table: str
    seconds: dict[str, float] = field(default_factory=dict)
    sample: tuple[dict, ...] = ()

    @property
    def ok(self) -> bool:
        return (
            self.rows_ingested == self.rows_generated
            and self.duplicate_keys == 0
            and self.missing_keys == 0
            and self.groups_read_back == self.groups_computed
            and self.aggregate_matches_source
        )


def generate_orders(spark, path: Path, rows: int):
    """Write `rows` sample orders as Parquet at `path`; returns the DataFrame read from it."""
    from pyspark.sql import functions as F

    regions = F.array(*[F.lit(r) for r in REGIONS])
    df = spark.range(0, rows, numPartitions=max(1, min(8, rows // 50_000 + 1))).select(
        F.col("id").alias("order_id"),
        F.concat(F.lit("cust-"), F.pmod(F.xxhash64("id"), F.lit(997)).cast("string")).alias(
            "customer"
        ),
        F.element_at(
            regions, (F.pmod(F.xxhash64("id", F.lit(1)), F.lit(len(REGIONS))) + 1).cast("int")
        ).alias("region"),  # fmt: skip
        (F.pmod(F.xxhash64("id", F.lit(2)), F.lit(100_000)) / 100.0).alias("amount"),
        (F.pmod(F.xxhash64("id", F.lit(3)), F.lit(9)) + 1).cast("int").alias("quantity"),
        (F.pmod(F.xxhash64("id", F.lit(4)), F.lit(20)) == 0).alias("cancelled"),
        F.timestamp_seconds(
            F.lit(1_717_200_000) + F.pmod(F.xxhash64("id", F.lit(5)), F.lit(DAYS * 86_400))
        ).alias("ordered_at"),
    )
    df.write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path))


def create_tables(
    coordinators: str,
    orders: str,
    result: str,
    num_tablets: int,
    rf: int,
    credentials: str | None = None,
) -> None:
    import logcentric
    from logcentric import Column

    with logcentric.connect(coordinators, timeout_s=60.0, credentials=credentials) as client:
        existing = set(client.list_tables())
        for name in (orders, result):
            if name in existing:
                client.drop_table(name)
        client.create_table(
            orders,
            [
                Column("order_id", "int64", key=True),
                Column("customer", "string"),
                Column("region", "string"),
                Column("amount", "double"),
                Column("quantity", "int32"),
                Column("cancelled", "bool"),
                Column("ordered_at", "timestamp"),
            ],
            num_tablets=num_tablets,
            replication_factor=rf,
        )
        client.create_table(
            result,
            [
                Column("region", "string", key=True),
                Column("day", "string", key=True),
                Column("orders", "int64"),
                Column("customers", "int64"),
                Column("revenue_cents", "int64"),
                Column("max_amount", "double", nullable=True),
            ],
            num_tablets=2,
            replication_factor=rf,
        )


def aggregate(df):
    """Revenue per region and day of the orders that were not cancelled."""
    from pyspark.sql import functions as F

    return (
        df.where(~F.col("cancelled"))
        .withColumn("day", F.date_format(F.col("ordered_at"), "yyyy-MM-dd"))
        .groupBy("region", "day")
        .agg(
            F.count(F.lit(1)).alias("orders"),
            F.countDistinct("customer").alias("customers"),
            # Integer cents: a sum of doubles depends on the order of its terms, and the check
            # compares two aggregates computed in different orders.
            F.sum(F.round(F.col("amount") * 100).cast("long") * F.col("quantity")).alias(
                "revenue_cents"
            ),
            F.max("amount").alias("max_amount"),
        )
    )


def _options(credentials: str | None) -> dict[str, str]:
    """The data source's `credentials` option when there is a file ("" would mean none)."""
    return {"credentials": credentials} if credentials else {}


def _write(df, coordinators: str, table: str, operation: str, credentials: str | None) -> None:
    (
        df.write.format(FORMAT)
        .option("coordinators", coordinators)
        .option("table", table)
        .option("operation", operation)
        .options(**_options(credentials))
        .mode("append")
        .save()
    )


def _read(spark, coordinators: str, table: str, credentials: str | None):
    return (
        spark.read.format(FORMAT)
        .option("coordinators", coordinators)
        .option("table", table)
        .options(**_options(credentials))
        .load()
    )


def ingest(
    source,
    coordinators: str,
    table: str,
    rows: int,
    slices: int,
    on_midpoint: Callable[[], None] | None,
    credentials: str | None = None,
) -> int:
    """Upsert the source in `slices` write jobs; returns how many slice writes were retried."""
    from pyspark.sql import functions as F

    retries = 0
    bounds = [rows * k // slices for k in range(slices + 1)]
    for k in range(slices):
        if k == slices // 2 and on_midpoint is not None:
            log.info("ingest midpoint (%d of %d slices written): callback", k, slices)
            on_midpoint()
        part = source.where((F.col("order_id") >= bounds[k]) & (F.col("order_id") < bounds[k + 1]))
        for attempt in range(1, SLICE_ATTEMPTS_MAX + 1):
            try:
                _write(part, coordinators, table, "upsert", credentials)
                break
            except Exception as err:  # a Spark job failure arrives as a JVM-wrapped exception
                if attempt == SLICE_ATTEMPTS_MAX:
                    raise PipelineError(
                        f"ingest slice {k} failed {attempt} times; last error: {_first_line(err)}"
                    ) from err
                retries += 1
                log.warning("ingest slice %d attempt %d failed (%s); again", k, attempt,
                            _first_line(err))  # fmt: skip
        log.info("ingest slice %d/%d written (order ids %d..%d)", k + 1, slices, bounds[k],
                 bounds[k + 1] - 1)  # fmt: skip
    return retries


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else type(err).__name__


def run_pipeline(
    spark,
    coordinators: str,
    workdir: Path | str,
    *,
    rows: int = ROWS_DEFAULT,
    on_ingest_midpoint: Callable[[], None] | None = None,
    ingest_slices: int = INGEST_SLICES_DEFAULT,
    table_prefix: str = "pipeline_",
    num_tablets: int = NUM_TABLETS_DEFAULT,
    replication_factor: int = 1,
    credentials: str | None = None,
) -> PipelineResult:
    """Run every step; the SparkSession must have the data source registered.
    `credentials`: a credentials file (CURVE as its principal), None for plaintext."""
    from pyspark.sql import functions as F

    if rows < 1 or ingest_slices < 1:
        raise ValueError("rows and ingest_slices must be positive")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    orders, result = f"{table_prefix}orders", f"{table_prefix}region_daily"
    seconds: dict[str, float] = {}

    started = time.monotonic()
    source = generate_orders(spark, workdir / "orders.parquet", rows)
    seconds["generate"] = time.monotonic() - started

    started = time.monotonic()
    create_tables(coordinators, orders, result, num_tablets, replication_factor, credentials)
    retries = ingest(
        source, coordinators, orders, rows, ingest_slices, on_ingest_midpoint, credentials
    )
    seconds["ingest"] = time.monotonic() - started

    started = time.monotonic()
    table_df = _read(spark, coordinators, orders, credentials)
    keys = table_df.select("order_id").cache()
    try:
        ingested = keys.count()
        distinct = keys.distinct().count()
        missing = source.select("order_id").exceptAll(keys.distinct()).count()
    finally:
        keys.unpersist()
    seconds["verify_ingest"] = time.monotonic() - started

    started = time.monotonic()
    computed = aggregate(table_df).cache()
    try:
        groups_computed = computed.count()
        _write(computed, coordinators, result, "upsert", credentials)
    finally:
        computed.unpersist()
    seconds["aggregate_and_write"] = time.monotonic() - started

    started = time.monotonic()
    columns = ["region", "day", "orders", "customers", "revenue_cents", "max_amount"]
    read_back = _read(spark, coordinators, result, credentials).select(*columns)
    expected = aggregate(source).select(*columns)
    groups_read_back = read_back.count()
    matches = (
        read_back.exceptAll(expected).count() == 0 and expected.exceptAll(read_back).count() == 0
    )
    top = read_back.orderBy(F.col("revenue_cents").desc(), "region", "day")
    sample = tuple(r.asDict() for r in top.limit(SAMPLE_ROWS).collect())
    seconds["verify_result"] = time.monotonic() - started

    return PipelineResult(
        rows_generated=rows,
        rows_ingested=ingested,
        duplicate_keys=ingested - distinct,
        missing_keys=missing,
        slice_retries=retries,
        groups_computed=groups_computed,
        groups_read_back=groups_read_back,
        aggregate_matches_source=matches,
        orders_table=orders,
        result_table=result,
        seconds=seconds,
        sample=sample,
    )


def summary(result: PipelineResult) -> str:
    lines = [
        "== pipeline summary ==",
        f"rows generated (Parquet)        {result.rows_generated}",
        f"rows in {result.orders_table:<23} {result.rows_ingested} "
        f"(duplicates {result.duplicate_keys}, missing {result.missing_keys}, "
        f"slice writes retried {result.slice_retries})",
        f"aggregate rows computed         {result.groups_computed}",
        f"rows in {result.result_table:<23} {result.groups_read_back}",
        f"aggregate equals Parquet-only   {result.aggregate_matches_source}",
        "times: " + ", ".join(f"{k} {v:.1f}s" for k, v in result.seconds.items()),
        f"top {len(result.sample)} rows of {result.result_table} by revenue:",
    ]
    for row in result.sample:
        lines.append("  " + ", ".join(f"{k}={v}" for k, v in row.items()))
    lines.append("RESULT: " + ("OK" if result.ok else "FAILED"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rpc.console import add_version

    parser = argparse.ArgumentParser(
        prog="python -m jobs.pipeline", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--coordinators", help="host:port[,host:port...] of the coordinators")
    parser.add_argument("--cluster", help="a cluster name of the clusters file")
    parser.add_argument(
        "--credentials",
        metavar="FILE",
        default=None,
        help="a credentials file: CURVE as its principal (else $LOGCENTRIC_CREDENTIALS, else "
        "the cluster's entry in the clusters file; none: plaintext)",
    )
    parser.add_argument(
        "--master",
        default=None,
        help="Spark master (default: spark-submit's --master or spark.master, else local[*])",
    )
    parser.add_argument("--rows", type=int, default=ROWS_DEFAULT)
    parser.add_argument("--slices", type=int, default=INGEST_SLICES_DEFAULT,
                        help="ingest write jobs")  # fmt: skip
    parser.add_argument(
        "--workdir",
        type=Path,
        default=Path(".run/pipeline"),
        help="where the sample Parquet goes (shared storage on a cluster)",
    )
    parser.add_argument("--table-prefix", default="pipeline_")
    parser.add_argument("--num-tablets", type=int, default=NUM_TABLETS_DEFAULT)
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--keep-workdir", action="store_true")
    parser.add_argument("--log-level", default="INFO")
    add_version(parser, "python -m jobs.pipeline")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its gateway chatter is not the job's
    # py4j reports a Ctrl-C that lands in a call to the JVM itself, with a traceback, on the
    # root logger ("KeyboardInterrupt while sending command.") and its own (a broken pipe
    # while it cleans up): the job says it in one line.
    # A logger's filter sees only records logged on it: the handlers' see the propagated too.
    for handler in logging.getLogger().handlers:
        handler.addFilter(_NotKeyboardInterrupt())

    from logcentric import clusters
    from rpc import credentials
    from rpc.errors import RpcError

    try:
        coordinators = ",".join(clusters.resolve(args.coordinators, args.cluster))
        entry = "" if args.credentials else clusters.credentials_of(args.coordinators, args.cluster)
        creds = credentials.find_path(args.credentials, entry)
        if creds:
            credentials.load(creds)  # checked once here: missing, unreadable, 0644
    except RpcError as err:
        parser.error(str(err))
    args.credentials = os.path.abspath(creds) if creds else None
    # Executors write the sample Parquet and others read it: a path relative to the driver's
    # directory would name another place in each executor's own working directory.
    workdir = args.workdir.resolve()
    try:
        return _run(args, coordinators, workdir)
    except KeyboardInterrupt:
        print("pipeline: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


class _NotKeyboardInterrupt(logging.Filter):
    """Drops a log record whose exception is a KeyboardInterrupt or arose while handling one
    (py4j's, see `main`: also "Exception occurred while shutting down connection", a broken
    pipe met while it cleans up after the interrupt)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        seen = 0
        while exc is not None and seen < 16:  # a bounded walk of the chain
            if isinstance(exc, KeyboardInterrupt):
                return False
            exc = exc.__cause__ or exc.__context__
            seen += 1
        return True


def _start_spark(master: str | None, workdir: Path):
    """The SparkSession. Started here (not under spark-submit), the driver's JVM writes its
    own output (Spark's log, its shutdown, Java stack traces of tasks a Ctrl-C cut short)
    to `workdir/SPARK_LOG` instead of this command's stderr: it is a child that inherits
    fd 2 at its start, so fd 2 points at that file for the length of the start."""
    from logcentric.spark.session import build_session, submitted

    if submitted():
        return _default_sigint(build_session(master, "logcentric-pipeline")), None
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / SPARK_LOG
    saved = os.dup(2)
    try:
        with open(log_path, "ab") as log_file:
            sys.stderr.flush()
            os.dup2(log_file.fileno(), 2)
            try:
                return _default_sigint(build_session(master, "logcentric-pipeline")), log_path
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def _default_sigint(spark):
    """Ctrl-C back to Python's own KeyboardInterrupt. A SparkContext installs a SIGINT
    handler that calls the JVM (cancelAllJobs) from inside the signal handler, while the
    main thread may be in the middle of a call to it: py4j then fails with a traceback
    ("reentrant call"). Here Ctrl-C only raises; `_stop_spark` cancels what runs."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError):
            if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
                signal.signal(signal.SIGINT, signal.default_int_handler)
    return spark


def _stop_spark(spark) -> None:
    """Stop the session (None: its start was cut short) within SPARK_STOP_S, then make sure
    the JVM this process started is gone (SIGTERM, SIGKILL after JVM_EXIT_S) with its
    Python workers (descendants left in our process group). Ctrl-C is ignored meanwhile:
    each step has its bound."""
    import threading

    from pyspark import SparkContext

    from optools.localcluster import _sweep_own_group, group_snapshot
    from rpc.console import ignored_interrupts

    with ignored_interrupts():
        gateway = SparkContext._gateway
        proc = getattr(gateway, "proc", None)  # None under spark-submit: not ours to end
        if spark is not None:
            stopper = threading.Thread(target=spark.stop, name="spark-stop", daemon=True)
            stopper.start()
            stopper.join(SPARK_STOP_S)
        if gateway is not None and proc is None:
            return  # spark-submit's JVM
        # Its Python workers, known before the JVM goes: then they are init's orphans.
        workers = group_snapshot()
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(JVM_EXIT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(JVM_EXIT_S)
        _sweep_own_group(JVM_EXIT_S, workers)


def _run(args: argparse.Namespace, coordinators: str, workdir: Path) -> int:
    from pyspark.errors import PySparkException

    from rpc.errors import RpcError

    spark = None
    try:
        spark, spark_log = _start_spark(args.master, workdir)
        print(
            f"pipeline: Spark master {spark.sparkContext.master}, coordinators {coordinators}",
            flush=True,
        )
        if spark_log is not None:
            print(f"pipeline: Spark's own log in {spark_log}", flush=True)
        result = run_pipeline(
            spark,
            coordinators,
            workdir,
            rows=args.rows,
            ingest_slices=args.slices,
            table_prefix=args.table_prefix,
            num_tablets=args.num_tablets,
            replication_factor=args.replication_factor,
            credentials=args.credentials,
        )
    except (PipelineError, RpcError, PySparkException) as err:
        log.debug("pipeline failed", exc_info=True)
        print(f"pipeline failed: {_first_line(err)}", file=sys.stderr)
        return 1
    finally:
        _stop_spark(spark)
        if not args.keep_workdir:
            shutil.rmtree(workdir / "orders.parquet", ignore_errors=True)
    print(summary(result), flush=True)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
