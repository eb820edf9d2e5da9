"""The "logcentric" Spark 4 Python data source: read and write cluster tables.

Read: `schema()` asks the coordinator for the table's schema; `partitions()` plans the
tablets the `predicates` option can match (all of them unless the predicates pin the hash
key: the client's tablet pruning) and deals them into at most N tasks: N = the
`partitions` option, else the session's defaultParallelism as `register(spark)` saw it on
the driver (`default_partitions`, a class attribute of the registered subclass), 0 = one
task per tablet; each task streams its tablets' Arrow batches
through `Table.scan_tablet` with its Python worker's client, which Spark's reused workers
keep between tasks and queries (`_shared_client`; projection = the `columns` option;
predicates = the `predicates` option; Spark's own filters are evaluated by Spark: no
pushFilters, design/spark.md). Batches go to Spark as Arrow, never row by row.

Write (`DataSourceArrowWriter`): each task opens one client and one session, applies its
Arrow batches with the `operation` option (insert | upsert | delete), flushes, and fails with
the first per-row errors when any row failed. There is no transaction across tasks: rows
that tasks flushed before a failure stay written; `abort` only logs. Upsert is the
operation to use when a job may be retried (Spark task retries, a rerun after a failure).

Options: coordinators or cluster (else LOGCENTRIC_COORDINATORS / LOGCENTRIC_CLUSTER / the
clusters file's default, as `logcentric.connect`), table (required), operation, columns,
predicates, partitions, flush_rows_max, timeout_s, credentials (a credentials file: CURVE as its
principal; else LOGCENTRIC_CREDENTIALS or the cluster's clusters-file entry; the executors
read it at the same path); see logcentric/spark/mapping.py and design/spark.md.
A cluster name is resolved once, on the driver: the readers and writers that travel to the
executors carry the addresses, so executors on other hosts need no clusters file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from logcentric.spark import mapping
from logcentric.spark.mapping import Operation, OptionError, SourceOptions

FORMAT_NAME = "logcentric"
logger = logging.getLogger(__name__)


def _resolve_cluster(options: SourceOptions) -> SourceOptions:
    """The options with the coordinators' addresses filled in (`logcentric.clusters`) and
    the credentials file found and checked (rpc/credentials.py: the option, else
    LOGCENTRIC_CREDENTIALS, else the cluster's clusters-file entry)."""
    from logcentric import clusters
    from logcentric.errors import LogcentricError
    from rpc import credentials

    coordinators, cluster = options.coordinators or None, options.cluster or None
    try:
        entry = "" if options.credentials else clusters.credentials_of(coordinators, cluster)
        path = credentials.find_path(options.credentials or None, entry)
        found = credentials.load(path) if path else None
    except LogcentricError as err:
        raise OptionError(f'option "credentials": {err.message}') from None
    try:
        addresses = clusters.resolve(coordinators, cluster)
    except LogcentricError as err:
        if found is None or coordinators or cluster:
            raise OptionError(
                f'option "coordinators" (HOST:PORT,...) or option "cluster" (NAME): {err.message}'
            ) from None
        addresses = found.addresses  # the credentials file's own coordinators
    return dataclasses.replace(
        options,
        coordinators=tuple(addresses),
        cluster="",
        credentials=os.path.abspath(path) if path else "",
    )


# The client of this process's read tasks (`_shared_client`): (pid, key, client).
_shared: tuple[int, tuple, object] | None = None
_shared_lock = threading.Lock()


def _shared_client(options: SourceOptions):  # -> logcentric.client.Client
    """One client per Python worker process for the read tasks it runs, kept between tasks
    and queries: Spark reuses its Python workers (spark.python.worker.reuse, on by
    default), and a client per task paid a connection, two coordinator calls for the
    table and a close on every task (design/spark.md, Speed). Made again when the options
    name other coordinators, another credentials file or a changed one, another timeout,
    and in a forked child (the parent's client threads do not exist there)."""
    global _shared
    path = options.credentials
    stamp = None
    if path:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    key = (options.coordinators, path, stamp, options.timeout_s)
    with _shared_lock:
        if _shared is not None and _shared[0] == os.getpid() and _shared[1] == key:
            return _shared[2]
        old = _shared
        _shared = (os.getpid(), key, _open_client(options))
    if old is not None and old[0] == os.getpid():
        old[2].close()
    return _shared[2]


def _open_client(options: SourceOptions):  # -> logcentric.client.Client
    # Imported here: the data source object is pickled to the Python workers, which import
    # the client library themselves.
    from logcentric.client import Client

    assert options.coordinators, "the cluster is resolved when the source is defined"
    return Client(
        list(options.coordinators),
        timeout_s=options.timeout_s,
        credentials=options.credentials or None,
    )


@dataclass(frozen=True, slots=True)
class TableInfo:
    """What the driver learned about the table; travels to the workers inside the reader."""

    table_id: str
    arrow_schema: pa.Schema  # the table's full schema
    key_columns: tuple[str, ...]


def _describe_table(options: SourceOptions) -> TableInfo:
    with _open_client(options) as client:
        t = client.table(options.table)
        return TableInfo(str(t.table_id), t.arrow_schema, tuple(t.key_columns))


class TabletPartition(InputPartition):
    """The tablets one Spark task scans, one after another: one tablet by default, several
    when the "partitions" option deals the tablets into fewer tasks."""

    def __init__(self, tablet_ids: Sequence[str], index: int) -> None:
        super().__init__(tuple(tablet_ids))
        self.tablet_ids = tuple(tablet_ids)
        self.index = index

    @property
    def tablet_id(self) -> str:
        """The tablet of a one-tablet partition (the default plan)."""
        (only,) = self.tablet_ids
        return only


def deal_tablets(tablet_ids: Sequence[str], partitions: int) -> list[list[str]]:
    """`tablet_ids` (in bucket order) in at most `partitions` runs of consecutive tablets
    whose lengths differ by one at most; 0: one run per tablet."""
    n = len(tablet_ids) if partitions <= 0 else min(partitions, len(tablet_ids))
    size = len(tablet_ids)
    return [list(tablet_ids[i * size // n : (i + 1) * size // n]) for i in range(n)]


class TableDataSource(DataSource):
    """`spark.read.format("logcentric")` / `df.write.format("logcentric")`."""

    # Read tasks when the "partitions" option is not given (0: one per tablet). This class,
    # as Spark finds it by name (`pyspark_logcentric`), knows no session: one per tablet.
    # `register(spark)` registers a subclass carrying the session's defaultParallelism.
    default_partitions: int = 0

    def __init__(self, options) -> None:
        super().__init__(options)
        parsed = mapping.parse_options(dict(options))
        if parsed.partitions is None:
            parsed = dataclasses.replace(parsed, partitions=type(self).default_partitions)
        self._parsed = _resolve_cluster(parsed)
        self._info: TableInfo | None = None

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def _table_info(self) -> TableInfo:
        if self._info is None:
            self._info = _describe_table(self._parsed)
        return self._info

    def schema(self) -> StructType:
        info = self._table_info()
        return mapping.spark_schema(mapping.project(info.arrow_schema, self._parsed.columns))

    def reader(self, schema: StructType) -> DataSourceReader:
        info = self._table_info()
        read_schema = mapping.project(info.arrow_schema, schema.fieldNames())
        predicates = []
        if self._parsed.predicates:
            predicates = mapping.parse_predicates(self._parsed.predicates, info.arrow_schema)
        return TableReader(self._parsed, info, read_schema, predicates)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise OptionError(
                'mode("overwrite") is not supported: a table is never truncated by a write; '
                'use mode("append") with option("operation", "insert|upsert|delete")'
            )
        info = self._table_info()
        mapping.check_write_columns(
            schema.fieldNames(), info.arrow_schema, info.key_columns, self._parsed.operation
        )
        return TableWriter(self._parsed, info)


class TableReader(DataSourceReader):
    """Scans each tablet with the DataFrame's projection and the "predicates" option.

    No pushFilters: Spark evaluates every filter of a query itself (design/spark.md: Spark's
    Python filter pushdown hands a reused DataFrame the previous query's filters in 4.3).
    """

    def __init__(
        self,
        options: SourceOptions,
        info: TableInfo,
        read_schema: pa.Schema,
        predicates: list[mapping.Predicate],
    ) -> None:
        self.options = options
        self.info = info
        self.read_schema = read_schema
        self.predicates = predicates

    def partitions(self) -> Sequence[InputPartition]:
        """The tablets the "predicates" option can match: when they pin every hash-key
        column (`=`, `in`, a narrow integer range), only the tablets of those keys' buckets
        (`Table.scan_tablets`, the client's pruning), else every tablet, dealt into at most
        N partitions (runs of consecutive buckets): N = the "partitions" option, else the
        session's defaultParallelism (`TableDataSource.default_partitions`); 0: one
        partition per tablet."""
        t = _shared_client(self.options).table(self.options.table)
        t.refresh()  # this query's tablets and locations, whatever an earlier query cached
        self._check_same_table(t)
        tablets = sorted(t.scan_tablets(self.predicates), key=lambda info: info.hash_bucket)
        runs = deal_tablets([str(info.tablet_id) for info in tablets], self.options.partitions)
        return [TabletPartition(run, i) for i, run in enumerate(runs)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TabletPartition), partition
        from logcentric.errors import TabletNotFound

        target = mapping.spark_batch_schema(self.read_schema)
        # The process's client and its cached table handle: no coordinator call per task
        # unless the handle is not this query's table (then it is looked up again).
        t = _shared_client(self.options).table(self.options.table)
        if str(t.table_id) != self.info.table_id:
            t.refresh()
            self._check_same_table(t)
        # Each tablet is its own scan (its own snapshot, as with one tablet per task).
        for tablet_id in partition.tablet_ids:
            batches = t.scan_tablet(
                tablet_id,
                projection=list(self.read_schema.names),
                predicates=list(self.predicates),
                ordered=False,  # Spark promises no order: the server merges less
            )
            try:
                for batch in batches:
                    if batch.num_rows:
                        yield mapping.to_spark_batch(batch, target)
            except TabletNotFound:
                # The scan refreshed the handle and the tablet was gone: a table dropped and
                # created again since the handle was cached says so, as the lookup above does.
                self._check_same_table(t)
                raise

    def _check_same_table(self, t) -> None:
        if str(t.table_id) != self.info.table_id:
            raise RuntimeError(
                f"table {self.options.table!r} was dropped and created again during the query "
                f"(id {self.info.table_id} -> {t.table_id}); run the query again"
            )


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one write task did (its partition id and rows applied)."""

    partition_id: int
    rows: int


class WriteFailed(RuntimeError):
    """Per-row errors of a write task."""


class TableWriter(DataSourceArrowWriter):
    def __init__(self, options: SourceOptions, info: TableInfo) -> None:
        self.options = options
        self.info = info

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteCommit:
        from pyspark import TaskContext

        context = TaskContext.get()
        partition_id = context.partitionId() if context is not None else -1
        operation = self.options.operation
        rows = 0
        with _open_client(self.options) as client:
            t = client.table(self.options.table)
            session = client.new_session(flush_rows_max=self.options.flush_rows_max)
            try:
                apply = {
                    Operation.INSERT: session.insert,
                    Operation.UPSERT: session.upsert,
                    Operation.DELETE: session.delete,
                }[operation]
                for batch in iterator:
                    if not batch.num_rows:
                        continue
                    if operation is Operation.DELETE:
                        batch = batch.select(list(self.info.key_columns))
                    apply(t, mapping.to_table_batch(batch, self.info.arrow_schema))
                    rows += batch.num_rows
                    if session.errors:
                        break
                session.flush()
            finally:
                session.close()
            if session.errors:
                raise WriteFailed(
                    mapping.format_row_errors(session.errors, self.options.table, operation)
                    + f" [task partition {partition_id}; rows this task flushed before the "
                    "failure stay written]"
                )
        return WriteCommit(partition_id, rows)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteCommit))
        logger.info(
            "%s into %s: %d rows from %d tasks",
            self.options.operation.value,
            self.options.table,
            rows,
            len(messages),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Nothing to roll back: every row a task flushed is durable in the table. Say what
        # is known about it so that the user can decide (a rerun in upsert mode is safe).
        done = [m for m in messages if isinstance(m, WriteCommit)]
        logger.error(
            "%s into %s failed: %d of %d tasks had finished (%d rows, which stay written); "
            "failed tasks may have written part of their rows",
            self.options.operation.value,
            self.options.table,
            len(done),
            len(messages),
            sum(m.rows for m in done),
        )


def source_class(default_partitions: int) -> type[TableDataSource]:
    """A subclass of `TableDataSource` whose reads without the "partitions" option are dealt
    into at most `default_partitions` tasks (0: one per tablet).

    Made in this function, the class is not importable by its qualified name, so cloudpickle
    (which ships a registered source to the Python workers) pickles it by value, the class
    attribute with it; the base class and the methods are imported there as usual.
    """
    if not 0 <= default_partitions <= mapping.PARTITIONS_MAX:
        raise OptionError(f"default partitions must be in [0, {mapping.PARTITIONS_MAX}]")

    class SessionTableDataSource(TableDataSource):
        pass

    SessionTableDataSource.default_partitions = default_partitions
    return SessionTableDataSource


def register(spark, partitions: int | None = None) -> None:
    """Make format("logcentric") available in this SparkSession, its reads dealt by default
    into at most `partitions` tasks: when None, the session's defaultParallelism now (under
    a cluster manager, the executors' cores registered so far, or spark.default.parallelism;
    call again once the executors are up). 0: one task per tablet. The "partitions" option
    of a read wins over both."""
    if partitions is None:
        partitions = min(spark.sparkContext.defaultParallelism, mapping.PARTITIONS_MAX)
    spark.dataSource.register(source_class(partitions))
