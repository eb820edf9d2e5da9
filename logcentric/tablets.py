"""Data-path client of one tablet server: write sessions that batch per tablet, scanners that
yield Arrow record batches, and tablet administration calls.

Calls given a `patience_s` give the server up when it stays silent that long (no answer,
and no answer to a ping), however long their whole `timeout_s`: a hung server (SIGSTOPped,
its connection still up) costs about two patiences, while a live one doing a large write or
a slow scan batch is waited for (`meta.SilenceWatch`, given by the owner).

Imports only the rpc client, `meta.SilenceWatch` and the generated protocol module
(`rpc.protocols.tserver_pb2`), never tablet-server internals. The coordinator's client library
routes rows to tablets and tablets to servers; this module talks to one server.

    with TabletServerClient("127.0.0.1:7051") as ts:
        s = ts.new_session()
        s.insert("t1", [{"id": 1, "name": "a"}])
        s.flush()
        for batch in ts.scan("t1", projection=["id"], predicates=[("id", ">=", 0)]):
            ...
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from logcentric.meta import SilenceWatch
from rpc.client import RpcClient
from rpc.errors import RpcError, TimedOut, Unavailable
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols.tserver_pb2 import (
    AlterSchemaRequest,
    AlterSchemaResponse,
    ColumnSchemaPB,
    CreateTabletRequest,
    CreateTabletResponse,
    DataType,
    DeleteTabletRequest,
    DeleteTabletResponse,
    GetSchemaRequest,
    GetSchemaResponse,
    ListTabletsRequest,
    ListTabletsResponse,
    OpIdPB,
    OpType,
    PartitionPB,
    PredicateOp,
    PredicatePB,
    RequestIdPB,
    ScanRequest,
    ScanResponse,
    SchemaPB,
    StatusRequest,
    StatusResponse,
    ValuePB,
    WriteRequest,
    WriteResponse,
)

ARROW_TYPES: dict[int, pa.DataType] = {
    DataType.INT64: pa.int64(),
    DataType.INT32: pa.int32(),
    DataType.DOUBLE: pa.float64(),
    DataType.BOOL: pa.bool_(),
    DataType.STRING: pa.string(),
    DataType.BINARY: pa.binary(),
    DataType.TIMESTAMP: pa.timestamp("us"),
}
OPS = {
    "=": PredicateOp.EQ,
    "==": PredicateOp.EQ,
    "<": PredicateOp.LT,
    "<=": PredicateOp.LE,
    ">": PredicateOp.GT,
    ">=": PredicateOp.GE,
    "in": PredicateOp.IN,
    "is null": PredicateOp.IS_NULL,
    "is not null": PredicateOp.IS_NOT_NULL,
}
SESSION_ROWS_MAX_DEFAULT = 10_000
SESSION_BUFFER_ROWS_MAX = 1_000_000
# Threads a client keeps for scans' prefetched continuations: as many scans as this fetch
# ahead at once, more wait for a thread. Long-lived threads, because the rpc layer gives
# each calling thread a connection of its own (a thread per call would be a new CURVE
# connection per answer).
SCAN_PREFETCH_THREADS_MAX = 8

log = logging.getLogger(__name__)


def column(name: str, type_: str, *, key: bool = False, nullable: bool = False) -> ColumnSchemaPB:
    """A column for CreateTablet: type_ is int64, int32, double, bool, string, binary, timestamp."""
    return ColumnSchemaPB(
        name=name, type=DataType.Value(type_.upper()), is_key=key, nullable=nullable
    )


def arrow_schema(schema: SchemaPB) -> pa.Schema:
    return pa.schema(
        [pa.field(c.name, ARROW_TYPES[c.type], nullable=c.nullable) for c in schema.columns]
    )


def value_pb(value) -> ValuePB:
    if value is None:
        return ValuePB(is_null=True)
    if isinstance(value, bool):
        return ValuePB(bool_value=value)
    if isinstance(value, int):
        return ValuePB(int_value=value)
    if isinstance(value, float):
        return ValuePB(double_value=value)
    if isinstance(value, str):
        return ValuePB(string_value=value)
    if isinstance(value, bytes | bytearray):
        return ValuePB(binary_value=bytes(value))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        return ValuePB(int_value=(value - epoch) // datetime.timedelta(microseconds=1))
    raise TypeError(f"unsupported value type {type(value).__name__}")


_NO_VALUE = object()


def predicate(col: str, op: str, value=_NO_VALUE) -> PredicatePB:
    """("x", ">=", 3), ("x", "in", [1, 2]), ("x", "is null"). ValueError or TypeError
    for one that is not of these shapes."""
    if not isinstance(col, str) or not isinstance(op, str):
        raise TypeError("a predicate is (column, operator[, value]) with two strings first")
    pop = OPS.get(op.lower())
    if pop is None:
        raise ValueError(f"unknown predicate operator {op!r}")
    p = PredicatePB(column=col, op=pop)
    if pop in (PredicateOp.IS_NULL, PredicateOp.IS_NOT_NULL):
        if value is not _NO_VALUE and value is not None:
            raise ValueError(f"{op!r} takes no value")
        return p
    if value is _NO_VALUE:
        raise ValueError(f"{op!r} needs a value")
    if pop == PredicateOp.IN:
        if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
            raise TypeError(f"'in' needs a list of values, got {type(value).__name__}")
        p.values.extend(value_pb(v) for v in value)
    else:
        p.values.append(value_pb(value))
    return p


def ipc_bytes(table: pa.Table | pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        if isinstance(table, pa.RecordBatch):
            w.write_batch(table)
        else:
            w.write_table(table)
    return sink.getvalue().to_pybytes()


@dataclass(frozen=True, slots=True)
class TabletSchema:
    version: int
    arrow: pa.Schema
    pb: SchemaPB


class TabletServerClient:
    """Calls to one tablet server. Thread-safe."""

    def __init__(
        self,
        address: str,
        server_uuid: str = "",
        *,
        caller_uuid: str = "",
        timeout_s: float = 30.0,
        watch: SilenceWatch | None = None,
        keypair: KeyPair | None = None,
        server_key: str = "",
    ) -> None:
        """`watch` is needed by calls with a patience (the owner's, which closes it).
        `keypair` and `server_key` (both or neither): CURVE as the principal of that key
        pair, to a server that proves it holds `server_key` (the key the coordinator's
        locations give for `server_uuid`); without them, plaintext."""
        assert (keypair is None) == (not server_key), "CURVE needs a key pair and a server key"
        self.address = address
        self._caller_uuid = caller_uuid or f"client-{uuidlib.uuid4().hex}"
        self._keypair = keypair
        self.server_key = server_key
        self._rpc = self._new_rpc()
        self.timeout_s = timeout_s
        self.server_uuid = server_uuid or self._rpc.ping(timeout_s=timeout_s).uuid
        self._schemas: dict[str, TabletSchema] = {}
        self._lock = threading.Lock()
        self._watch = watch
        self._closed = False
        self._prefetch: ThreadPoolExecutor | None = None  # made by the first scan of many answers

    def _call(
        self,
        method: str,
        req,
        resp_type,
        *,
        idempotent: bool = False,
        sidecars=(),
        timeout_s: float | None = None,
        patience_s: float | None = None,
    ):
        """One call; with `patience_s`, given up when the server stays silent that long."""
        if patience_s is not None:
            assert self._watch is not None, "a call with a patience needs a SilenceWatch"
            return self._watch.call(
                lambda: self._rpc,
                self._detach,
                self.server_uuid,
                f"TServer.{method}",
                req,
                resp_type,
                timeout_s=self.timeout_s if timeout_s is None else timeout_s,
                patience_s=patience_s,
                idempotent=idempotent,
                sidecars=sidecars,
            )
        return self._rpc.call_with_sidecars(
            self.server_uuid,
            f"TServer.{method}",
            req,
            resp_type,
            timeout_s=self.timeout_s if timeout_s is None else timeout_s,
            idempotent=idempotent,
            sidecars=sidecars,
        )

    # ------------------------------------------------------------ admin
    def create_tablet(
        self,
        tablet_id: str,
        columns: Sequence[ColumnSchemaPB],
        *,
        table_id: str = "",
        table_name: str = "",
        partition: PartitionPB | None = None,
    ) -> SchemaPB:
        req = CreateTabletRequest(
            tablet_id=tablet_id,
            table_id=table_id,
            table_name=table_name,
            schema=SchemaPB(columns=list(columns)),
        )
        if partition is not None:
            req.partition.CopyFrom(partition)
        resp, _ = self._call("CreateTablet", req, CreateTabletResponse)
        self._remember(tablet_id, resp.schema)
        return resp.schema

    def delete_tablet(self, tablet_id: str, cas_config_index: int | None = None) -> OpIdPB:
        """Tombstone a replica; with `cas_config_index`, only if its committed config index
        is not greater (CasFailed otherwise)."""
        request = DeleteTabletRequest(tablet_id=tablet_id)
        if cas_config_index is not None:
            request.cas_config_index = cas_config_index
        resp, _ = self._call(
            "DeleteTablet",
            request,
            DeleteTabletResponse,
            idempotent=True,
        )
        with self._lock:
            self._schemas.pop(tablet_id, None)
        return resp.last_op_id

    def alter_schema(
        self,
        tablet_id: str,
        *,
        add: Sequence[ColumnSchemaPB] = (),
        drop: Sequence[str] = (),
        expected_version: int = 0,
    ) -> SchemaPB:
        req = AlterSchemaRequest(
            tablet_id=tablet_id,
            expected_version=expected_version,
            add_columns=list(add),
            drop_columns=list(drop),
        )
        resp, _ = self._call("AlterSchema", req, AlterSchemaResponse)
        self._remember(tablet_id, resp.schema)
        return resp.schema

    def schema(
        self,
        tablet_id: str,
        *,
        refresh: bool = False,
        timeout_s: float | None = None,
        patience_s: float | None = None,
    ) -> TabletSchema:
        """The tablet's schema, cached; `timeout_s` (default the client's) bounds a fetch,
        `patience_s` the silence of a hung server."""
        with self._lock:
            s = self._schemas.get(tablet_id)
        if s is None or refresh:
            resp, _ = self._call(
                "GetSchema",
                GetSchemaRequest(tablet_id=tablet_id),
                GetSchemaResponse,
                idempotent=True,
                timeout_s=timeout_s,
                patience_s=patience_s,
            )
            s = self._remember(tablet_id, resp.schema)
        return s

    def _remember(self, tablet_id: str, pb: SchemaPB) -> TabletSchema:
        s = TabletSchema(pb.version, arrow_schema(pb), pb)
        with self._lock:
            self._schemas[tablet_id] = s
        return s

    def list_tablets(
        self, *, brief: bool = False, not_serving_only: bool = False
    ) -> ListTabletsResponse:
        """The server's replicas; `brief`: only id, status, role, term and leader of each
        (cheap at thousands of replicas); `not_serving_only`: brief, and only those not
        RUNNING or knowing no leader (the answer's `replicas` counts them all)."""
        req = ListTabletsRequest(brief=brief, not_serving_only=not_serving_only)
        return self._call("ListTablets", req, ListTabletsResponse, idempotent=True)[0]

    def status(self) -> StatusResponse:
        return self._call("Status", StatusRequest(), StatusResponse, idempotent=True)[0]

    # ------------------------------------------------------------ data
    def write(
        self,
        tablet_id: str,
        blocks: Sequence[tuple[int, pa.Table | pa.RecordBatch]],
        schema_version: int | None = None,
        *,
        timeout_s: float | None = None,
        patience_s: float | None = None,
        request_id: RequestIdPB | None = None,
    ) -> WriteResponse:
        """One atomic write of row blocks [(OpType, rows)] to a tablet; `timeout_s` (default
        the client's) bounds the whole of it, a schema fetch included; `patience_s` (none by
        default) gives it up earlier when the server falls silent (TIMED_OUT, the outcome
        unknown), but never cuts a write the server is still working on. `request_id` (the
        same on every resend of one write, as `Session` sends it) makes a resend of a write
        that was applied come back with the first answer instead of being applied again;
        without one (tools, tests) the write has no dedup."""
        deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
        if schema_version is None:
            schema_version = self.schema(
                tablet_id, timeout_s=timeout_s, patience_s=patience_s
            ).version
        req = WriteRequest(
            tablet_id=tablet_id, schema_version=schema_version, ops=[op for op, _ in blocks]
        )
        if request_id is not None:
            req.request_id.CopyFrom(request_id)
        sidecars = [ipc_bytes(t) for _, t in blocks]
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(f"write to tablet {tablet_id}: no time left after the schema fetch")
        return self._call(
            "Write",
            req,
            WriteResponse,
            sidecars=sidecars,
            timeout_s=left,
            patience_s=patience_s,
        )[0]

    def new_session(self, flush_rows_max: int = SESSION_ROWS_MAX_DEFAULT) -> WriteSession:
        return WriteSession(self, flush_rows_max)

    def scan(
        self,
        tablet_id: str,
        *,
        projection: Sequence[str] = (),
        predicates: Sequence[PredicatePB | tuple] = (),
        lower_bound: Sequence = (),
        upper_bound: Sequence = (),
        batch_rows_max: int = 0,
        limit: int = 0,
        timeout_s: float | None = None,
        patience_s: float | None = None,
        ordered: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """Arrow record batches of the rows that match, in key order (not `ordered`: in no
        promised order, Kudu's unordered scan; the server merges less). `timeout_s` (default
        the client's) bounds the first call, which opens the scan; each continuation has
        the client's timeout. `patience_s` (none by default) gives up any of these calls
        when the server falls silent that long (a slow batch of a live server is waited
        for; each answer is one batch, bounded by the server).

        The next answer is fetched (in a thread) while this one's batches are yielded, one
        answer ahead at most; an error of that call is raised after this answer's batches.
        Closing the generator early waits for that call and closes the server's scanner."""
        preds = [p if isinstance(p, PredicatePB) else predicate(*p) for p in predicates]
        req = ScanRequest(
            tablet_id=tablet_id,
            projection=list(projection),
            predicates=preds,
            lower_bound=[value_pb(v) for v in lower_bound],
            upper_bound=[value_pb(v) for v in upper_bound],
            batch_rows_max=batch_rows_max,
            limit=limit,
            unordered=not ordered,
        )
        resp, sidecars = self._call(
            "Scan",
            req,
            ScanResponse,
            idempotent=True,
            timeout_s=timeout_s,
            patience_s=patience_s,
        )
        # One answer ahead (Kudu's scanners prefetch): the continuation is asked for before
        # this answer's batches are yielded, so that the server reads, encodes and encrypts
        # the next answer while this end decrypts, decodes and hands out this one (CURVE's
        # cost at both ends overlaps instead of adding up, design/security.md section 7).
        # Never more than one: the client holds at most two answers of a scan.
        pending: Future | None = None
        try:
            while True:
                if resp.has_more:
                    pending = self._fetch_ahead(resp.scanner_id, patience_s)
                for sc in sidecars:
                    reader = pa.ipc.open_stream(pa.py_buffer(sc))
                    yield from reader
                if pending is None:
                    return
                # The continuation's error reaches the caller here, after this answer's
                # batches, where it did when the call was made only now.
                taken, pending = pending, None
                resp, sidecars = taken.result()
        finally:
            if pending is not None:  # the caller stopped early (closed the generator)
                self._abandon_scan(pending, patience_s)

    def _fetch_ahead(self, scanner_id: str, patience_s: float | None) -> Future:
        """The scan's continuation, started on one of the client's prefetch threads."""
        with self._lock:
            if self._closed:  # raised where the call would have raised it
                closed: Future = Future()
                closed.set_exception(Unavailable(f"the client of {self.address} is closed"))
                return closed
            if self._prefetch is None:
                self._prefetch = ThreadPoolExecutor(
                    SCAN_PREFETCH_THREADS_MAX, thread_name_prefix="tablets-scan-prefetch"
                )
            return self._prefetch.submit(
                self._call,
                "Scan",
                ScanRequest(scanner_id=scanner_id),
                ScanResponse,
                patience_s=patience_s,
            )

    def _abandon_scan(self, pending: Future, patience_s: float | None) -> None:
        """Wait for the continuation in flight (the server holds the scanner while it serves
        it, so a close before its answer would find nothing), then close the scanner if the
        scan had more, rather than leave its snapshot held until SCANNER_IDLE_S. Failures
        are logged, not raised: the caller has left, and the server expires what is left."""
        try:
            resp, _ = pending.result()
            if resp.has_more and not self._closed:
                self._call(
                    "Scan",
                    ScanRequest(scanner_id=resp.scanner_id, close=True),
                    ScanResponse,
                    idempotent=True,
                    patience_s=patience_s,
                )
        except RpcError as err:
            log.info("abandoned scan on %s: its scanner is left to expire: %s", self.address, err)

    def scan_table(self, tablet_id: str, **kwargs) -> pa.Table:
        batches = list(self.scan(tablet_id, **kwargs))
        return pa.Table.from_batches(batches) if batches else pa.table({})

    def _new_rpc(self) -> RpcClient:
        if self._keypair is None:
            return RpcClient(self.address, caller_uuid=self._caller_uuid)
        return RpcClient(
            self.address,
            caller_uuid=self._caller_uuid,
            curve=ClientCurve(self._keypair),
            server_key=self.server_key,
        )

    def _detach(self, rpc: RpcClient) -> bool:
        """The server fell silent (SilenceWatch): later calls go through a new rpc client
        (a new connection); the watch closes this one, ending the calls in flight on it."""
        with self._lock:
            if self._closed or self._rpc is not rpc:
                return False
            self._rpc = self._new_rpc()
            return True

    def close(self) -> None:
        with self._lock:
            self._closed = True
            rpc = self._rpc
            prefetch, self._prefetch = self._prefetch, None
        rpc.close()  # ends the continuations in flight
        if prefetch is not None:
            prefetch.shutdown(wait=True)

    def __enter__(self) -> TabletServerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class WriteSession:
    """Buffers operations per tablet; flush() sends one atomic write per tablet.

    Consecutive rows with the same operation form one row block. A tablet's buffer is sent
    automatically when it reaches flush_rows_max rows. Not thread-safe: one per thread."""

    def __init__(self, client: TabletServerClient, flush_rows_max: int) -> None:
        assert 0 < flush_rows_max <= SESSION_BUFFER_ROWS_MAX
        self.client = client
        self.flush_rows_max = flush_rows_max
        self._buf: dict[str, list[tuple[int, list[dict] | pa.Table]]] = {}
        self._rows: dict[str, int] = {}

    def insert(self, tablet_id: str, rows) -> None:
        self._add(tablet_id, OpType.INSERT, rows)

    def upsert(self, tablet_id: str, rows) -> None:
        self._add(tablet_id, OpType.UPSERT, rows)

    def update(self, tablet_id: str, rows) -> None:
        self._add(tablet_id, OpType.UPDATE, rows)

    def delete(self, tablet_id: str, rows) -> None:
        self._add(tablet_id, OpType.DELETE, rows)

    def _add(self, tablet_id: str, op: int, rows) -> None:
        """rows: a pyarrow Table/RecordBatch, or a list of dicts (column name -> value)."""
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        n = rows.num_rows if isinstance(rows, pa.Table) else len(rows)
        if n == 0:
            return
        blocks = self._buf.setdefault(tablet_id, [])
        if (
            blocks
            and blocks[-1][0] == op
            and isinstance(rows, list)
            and isinstance(blocks[-1][1], list)
        ):
            blocks[-1][1].extend(rows)
        else:
            blocks.append((op, list(rows) if isinstance(rows, list) else rows))
        self._rows[tablet_id] = self._rows.get(tablet_id, 0) + n
        if self._rows[tablet_id] >= self.flush_rows_max:
            self._flush_tablet(tablet_id)

    def pending_rows(self) -> int:
        return sum(self._rows.values())

    def flush(self) -> list[WriteResponse]:
        return [self._flush_tablet(t) for t in list(self._buf)]

    def _flush_tablet(self, tablet_id: str) -> WriteResponse:
        blocks = self._buf.pop(tablet_id, [])
        self._rows.pop(tablet_id, None)
        schema = self.client.schema(tablet_id)
        out = []
        for op, rows in blocks:
            if isinstance(rows, list):
                given = set().union(*rows)
                names = [f.name for f in schema.arrow if f.name in given]
                sub = pa.schema([schema.arrow.field(n) for n in names])
                rows = pa.Table.from_pylist(rows, schema=sub)
            out.append((op, rows))
        return self.client.write(tablet_id, out, schema.version)
