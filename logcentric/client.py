"""The client library: tables on the coordinator, rows on the tablet servers.

    with Client(["127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"]) as client:
        client.create_table("events", [Column("id", "int64", key=True), Column("v", "string")])
        table = client.table("events")
        with client.new_session() as session:
            session.insert(table, [{"id": 1, "v": "a"}])
        rows = table.to_arrow()

Coordinator calls go through `meta.CoordinatorClient`: to the leader, found by asking any
node and following NOT_LEADER hints, with backoff and jitter under a total deadline; every
mutating request carries a request id that stays the same across retries (exactly-once).

Data goes straight to tablet servers: rows are routed to tablets by the hash of their key
(`partition.py`), batched per tablet in a session and flushed on size, interval and close.
Tablet locations are cached per table and refreshed when a tablet server answers NOT_LEADER,
TABLET_NOT_FOUND or INVALID_NAME. Calls name the replica's server UUID: a server that was
wiped and came back at the same address under a new UUID refuses calls for its former self
(INVALID_NAME), and its clients are kept per (UUID, address). A batch rejected because of
one row (a duplicate key for an insert, a missing key for an update) is split until the bad
rows are isolated; they become per-row errors and the other rows are written.

Every attempt at one server, coordinator node or tablet server, may work until the call's
deadline but stay silent only for its patience (1 s, doubling each round to 8 s): a hung
server (a SIGSTOPped leader, its connection up) is given up for the next replica or node
after about two patiences (`meta.SilenceWatch`, one thread per Client).

Imports only rpc and generated protocol modules: no server code.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
import uuid as uuidlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from logcentric.meta import CoordinatorClient, SilenceWatch, attempt_patience_s
from logcentric.partition import bucket_of_rows, buckets_of_predicates
from logcentric.tablets import TabletServerClient, predicate
from rpc import errors
from rpc.client import HandshakeFailed, KeyRefused
from rpc.credentials import Credentials
from rpc.credentials import load as load_credentials
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols.tserver_pb2 import OpType, PredicateOp, RequestIdPB

BACKOFF_INITIAL_S = 0.02
BACKOFF_MAX_S = 1.0
# Tablet-server calls retry until the client's timeout, at most this many times: a new
# tablet's first election alone can take two election timeouts (about 2 s).
TSERVER_ATTEMPTS_MAX = 64
# The shortest timeout of one tablet-server call: a round that runs past the call's deadline
# (the second, which always runs) gives each replica this long.
ATTEMPT_TIMEOUT_MIN_S = 0.5
SESSION_ROWS_MAX = 1_000_000
TSERVER_CLIENTS_MAX = 1024  # tablet server clients kept open by one Client

log = logging.getLogger(__name__)

TYPE_NAMES = {
    "int64": cpb.INT64,
    "int32": cpb.INT32,
    "double": cpb.DOUBLE,
    "bool": cpb.BOOL,
    "string": cpb.STRING,
    "binary": cpb.BINARY,
    "timestamp": cpb.TIMESTAMP,
}
ARROW_TYPES = {
    cpb.INT64: pa.int64(),
    cpb.INT32: pa.int32(),
    cpb.DOUBLE: pa.float64(),
    cpb.BOOL: pa.bool_(),
    cpb.STRING: pa.string(),
    cpb.BINARY: pa.binary(),
    cpb.TIMESTAMP: pa.timestamp("us"),
}
OP_NAMES = {
    OpType.INSERT: "insert",
    OpType.UPSERT: "upsert",
    OpType.UPDATE: "update",
    OpType.DELETE: "delete",
}
# A write answered with one of these was refused because of its rows, not its destination.
ROW_ERRORS = (errors.AlreadyExists, errors.NotFound, errors.BadRequest)
# Rows of one write call that may be refused as not fitting the table (row errors); beyond,
# the whole call is refused (BadRequest): the input itself is wrong.
ROWS_REFUSED_MAX = 100
# A value quoted in a row error is cut to this many characters, Arrow's reason (which may
# quote the value again) to ARROW_REASON_CHARS_MAX.
VALUE_REPR_CHARS_MAX = 80
ARROW_REASON_CHARS_MAX = 200
# ...and with one of these, the destination was wrong or gone: refresh locations, try again.
# A tablet server that failed the CURVE handshake without refusing this client's key does not
# hold the key the locations gave for its UUID: another identity at that address now (a wiped
# server back as a new one), as INVALID_NAME says in plaintext. A refused key (KeyRefused) is
# this client's own problem: it is raised at once.
LOCATION_ERRORS = (
    errors.NotLeader,
    errors.TabletNotFound,
    errors.InvalidName,
    errors.TabletDeleted,
    HandshakeFailed,
)
# ...and with one of these, the server did not (or could not say it did) do the call:
# try the next replica (for a write, its outcome is unknown: see Session._send).
RETRIED_ERRORS = (errors.Unavailable, errors.TimedOut, errors.Throttled)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # int64, int32, double, bool, string, binary, timestamp
    key: bool = False
    nullable: bool = False

    def to_pb(self) -> cpb.ColumnSchema:
        if self.type not in TYPE_NAMES:
            raise errors.BadRequest(
                f"column {self.name!r}: unknown type {self.type!r} (one of {', '.join(TYPE_NAMES)})"
            )
        return cpb.ColumnSchema(
            name=self.name, type=TYPE_NAMES[self.type], nullable=self.nullable, is_key=self.key
        )


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    server_uuid: str
    address: str
    is_leader: bool
    server_state: str
    public_key: str = ""  # CURVE: the server's admitted key (the coordinator's locations)


@dataclass(frozen=True, slots=True)
class TabletInfo:
    tablet_id: str
    hash_bucket: int
    num_buckets: int
    replicas: tuple[ReplicaInfo, ...]

    def leader_first(self) -> list[ReplicaInfo]:
        """Replicas to try for a write or a scan: the reported leader, then live ones."""
        return sorted(self.replicas, key=lambda r: (not r.is_leader, r.server_state != "LIVE"))


@dataclass(frozen=True, slots=True)
class RowError:
    op: str
    row: dict
    status: str
    message: str


def arrow_schema_of(schema: cpb.Schema) -> pa.Schema:
    return pa.schema(
        [pa.field(c.name, ARROW_TYPES[c.type], nullable=c.nullable) for c in schema.columns]
    )


class Client:
    """A connection to a cluster. Thread-safe; a context manager."""

    def __init__(
        self,
        coordinators: Sequence[str] | str = (),
        *,
        timeout_s: float = 30.0,
        credentials: Credentials | str | os.PathLike | None = None,
    ) -> None:
        """`credentials` (a file's path, or rpc.credentials.Credentials): CURVE to the
        coordinators with the keys the file lists, and to each tablet server with the key
        the coordinator's locations give for its UUID (a replica without one, i.e. a
        tablet server not admitted with a key, is reached plaintext). Without coordinator
        addresses, the file's are used. None: plaintext everywhere."""
        if isinstance(coordinators, str):
            coordinators = [a.strip() for a in coordinators.split(",") if a.strip()]
        if credentials is not None and not isinstance(credentials, Credentials):
            credentials = load_credentials(credentials)
        self.credentials = credentials
        if not timeout_s > 0:
            raise errors.BadRequest(f"timeout_s must be above 0, got {timeout_s!r}")
        self.client_id = f"client-{uuidlib.uuid4().hex}"
        self.timeout_s = timeout_s
        # Gives up calls to silent (hung) servers, coordinators and tablet servers alike.
        self._watch = SilenceWatch("client-silence-watch")
        self.meta = CoordinatorClient(
            coordinators,
            client_id=self.client_id,
            timeout_s=timeout_s,
            watch=self._watch,
            credentials=credentials,
        )
        self._lock = threading.Lock()
        # (uuid, address, key): a key of its own is another identity, never the same client
        self._tservers: dict[tuple[str, str, str], TabletServerClient] = {}
        self._closed = False
        self._tables: dict[str, Table] = {}

    # -- coordinator -------------------------------------------------------------------

    def create_table(
        self,
        name: str,
        columns: Sequence[Column],
        *,
        num_tablets: int = 4,
        replication_factor: int = 0,
    ) -> str:
        """Create a table; returns its id. ALREADY_EXISTS if the name is taken.

        `replication_factor` 0 lets the coordinator choose: 3, or fewer when fewer tablet
        servers are live."""
        for what, n in (("num_tablets", num_tablets), ("replication_factor", replication_factor)):
            if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 0xFFFFFFFF:
                raise errors.BadRequest(f"{what} must be a whole number >= 0, got {n!r}")
        schema = cpb.Schema(columns=[c.to_pb() for c in columns])
        return self.meta.create_table(name, schema, num_tablets, replication_factor)

    def drop_table(self, name: str) -> str:
        self._forget(name)
        return self.meta.drop_table(name)

    def alter_table(
        self,
        name: str,
        *,
        new_name: str = "",
        add_columns: Sequence[Column] = (),
        drop_columns: Sequence[str] = (),
    ) -> int:
        """Returns the new schema version."""
        self._forget(name)
        answer = self.meta.alter_table(
            name,
            new_name=new_name,
            add_columns=[c.to_pb() for c in add_columns],
            drop_columns=list(drop_columns),
        )
        return answer.schema_version

    def list_tables(self) -> list[str]:
        return sorted(t.name for t in self.meta.list_tables())

    def describe_table(self, name: str) -> cpb.DescribeTableResponse:
        return self.meta.describe_table(name)

    def tablet_locations(self, name: str) -> cpb.GetTabletLocationsResponse:
        return self.meta.get_tablet_locations(name)

    def list_servers(self) -> list[cpb.ServerSummary]:
        return self.meta.list_servers()

    def table(self, name: str) -> Table:
        """A handle on a table (schema and tablet locations, fetched now and cached)."""
        with self._lock:
            cached = self._tables.get(name)
        if cached is not None:
            return cached
        table = Table(self, name)
        table.refresh()
        with self._lock:
            self._tables[name] = table
        return table

    def _forget(self, name: str) -> None:
        with self._lock:
            self._tables.pop(name, None)

    # -- tablet servers ----------------------------------------------------------------

    def tserver(self, replica: ReplicaInfo) -> TabletServerClient:
        """The client of a replica's server, by UUID and address. A server wiped and formatted
        again comes back at its address under a new UUID, and locations list both for a while
        (the old one DOWN): neither may replace the other's client, which another thread may
        be using. The least recently used client is closed beyond TSERVER_CLIENTS_MAX."""
        curve = self.credentials is not None and bool(replica.public_key)
        key = (replica.server_uuid, replica.address, replica.public_key if curve else "")
        with self._lock:
            if self._closed:
                raise errors.IllegalState("the client is closed")
            ts = self._tservers.pop(key, None)
            if ts is None:
                ts = TabletServerClient(
                    replica.address,
                    replica.server_uuid,
                    caller_uuid=self.client_id,
                    timeout_s=self.timeout_s,
                    watch=self._watch,
                    keypair=self.credentials.keypair if curve else None,
                    server_key=replica.public_key if curve else "",
                )
            self._tservers[key] = ts  # most recently used last
            while len(self._tservers) > TSERVER_CLIENTS_MAX:
                self._tservers.pop(next(iter(self._tservers))).close()
            return ts

    def new_session(
        self, *, flush_rows_max: int = 10_000, flush_interval_s: float = 1.0
    ) -> Session:
        return Session(self, flush_rows_max=flush_rows_max, flush_interval_s=flush_interval_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            tservers, self._tservers = list(self._tservers.values()), {}
        for ts in tservers:
            ts.close()
        self.meta.close()
        self._watch.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Table:
    """A table's schema and tablet locations, as last fetched from the coordinator."""

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = name
        self._lock = threading.Lock()
        self.table_id = ""
        self.schema_version = 0
        self.arrow_schema = pa.schema([])
        self.key_columns: list[str] = []
        self._tablets: list[TabletInfo] = []
        self._by_bucket: dict[int, TabletInfo] = {}

    def refresh(self) -> None:
        described = self.client.describe_table(self.name)
        locations = self.client.tablet_locations(self.name)
        tablets = [
            TabletInfo(
                tablet_id=t.tablet_id,
                hash_bucket=t.partition.hash_bucket,
                num_buckets=t.partition.num_buckets,
                replicas=tuple(
                    ReplicaInfo(r.server_uuid, r.address, r.is_leader, r.server_state, r.public_key)
                    for r in t.replicas
                ),
            )
            for t in locations.tablets
        ]
        with self._lock:
            self.table_id = described.table_id
            self.schema_version = described.schema.version
            self.arrow_schema = arrow_schema_of(described.schema)
            self.key_columns = [c.name for c in described.schema.columns if c.is_key]
            self._tablets = sorted(tablets, key=lambda t: t.hash_bucket)
            self._by_bucket = {t.hash_bucket: t for t in tablets}

    def tablets(self) -> list[TabletInfo]:
        with self._lock:
            return list(self._tablets)

    def num_buckets(self) -> int:
        with self._lock:
            return self._tablets[0].num_buckets if self._tablets else 0

    def tablet_for_bucket(self, bucket: int) -> TabletInfo:
        with self._lock:
            return self._by_bucket[bucket]

    def fit(self, rows) -> tuple[pa.Table, list[tuple[dict, str]]]:
        """Rows (Arrow table/batch or list of dicts) as an Arrow table of this table's types,
        and the rows that do not fit, each with why (a null in a non-nullable or key column,
        a value its column's type cannot hold). A column the table does not have, or a column
        of a type that cannot be cast at all, fails the whole call (BadRequest); so do more
        than ROWS_REFUSED_MAX rows that do not fit (the input is wrong, not a few rows)."""
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        refused: list[tuple[dict, str]] = []
        if isinstance(rows, pa.Table):
            twice = sorted({n for n in rows.column_names if rows.column_names.count(n) > 1})
            if twice:
                raise errors.BadRequest(f"the rows name column(s) {twice} more than once")
            fields = []
            for name in rows.column_names:
                if name not in self.arrow_schema.names:
                    raise errors.BadRequest(f"table {self.name} has no column {name!r}")
                fields.append(self.arrow_schema.field(name))
            target = pa.schema(fields)
            parts = self._fit_arrow(rows, target, refused)
        else:
            rows = list(rows)
            given = set().union(*rows) if rows else set()
            unknown = given - set(self.arrow_schema.names)
            if unknown:
                raise errors.BadRequest(f"table {self.name} has no column(s) {sorted(unknown)}")
            target = pa.schema([f for f in self.arrow_schema if f.name in given])
            parts = [
                fitted
                for part in self._fit_dicts(rows, target, refused)
                for fitted in self._fit_arrow(part, target, refused)
            ]
        if not parts:
            return target.empty_table(), refused
        return (parts[0] if len(parts) == 1 else pa.concat_tables(parts)), refused

    def _refuse(self, refused: list, row: dict, why: str) -> None:
        refused.append((row, why))
        if len(refused) > ROWS_REFUSED_MAX:
            raise errors.BadRequest(
                f"more than {ROWS_REFUSED_MAX} rows do not fit table {self.name}, e.g. "
                f"{refused[0][0]}: {refused[0][1]}"
            )

    def _fit_arrow(self, data: pa.Table, target: pa.Schema, refused: list) -> list[pa.Table]:
        """`data` cast to `target`, in parts: the rows that do not fit are found by halving
        (a few casts per refused row) and left out, into `refused`."""
        why = next(
            (
                f"column {f.name!r} is null, which it cannot be"
                for f in target
                if not f.nullable and data.column(f.name).null_count
            ),
            None,
        )
        if why is None:
            if data.schema.equals(target, check_metadata=False):
                return [data]
            try:
                return [data.cast(target)]
            except pa.ArrowNotImplementedError as exc:  # the column's type, not a row
                raise errors.BadRequest(f"rows do not fit table {self.name}: {exc}") from None
            except (pa.ArrowInvalid, ValueError) as exc:
                why = str(exc)
        if data.num_rows <= 1:
            if data.num_rows:
                self._refuse(refused, data.to_pylist()[0], _arrow_row_problem(data, target, why))
            return []
        half = data.num_rows // 2
        return self._fit_arrow(data.slice(0, half), target, refused) + self._fit_arrow(
            data.slice(half), target, refused
        )

    def _fit_dicts(self, rows: list[dict], target: pa.Schema, refused: list) -> list[pa.Table]:
        """Dicts as Arrow tables of `target`'s types; the dicts that cannot be converted are
        found by halving and left out, into `refused`. A float with a fractional part (or not
        finite) for an integer column is refused as the Arrow path refuses it: Arrow's own
        conversion of Python floats would cut it silently (1.5 stored as 1)."""
        ints = [f.name for f in target if pa.types.is_integer(f.type)]
        if ints:
            kept = []
            for row in rows:
                bad = next(
                    (
                        name
                        for name in ints
                        if isinstance(v := row.get(name), float)
                        and not (math.isfinite(v) and v.is_integer())
                    ),
                    None,
                )
                if bad is None:
                    kept.append(row)
                else:
                    self._refuse(
                        refused,
                        row,
                        f"column {bad!r}: float value {row[bad]!r} would be truncated "
                        f"converting to {target.field(bad).type}",
                    )
            rows = kept
        return self._fit_dict_parts(rows, target, refused)

    def _fit_dict_parts(self, rows: list[dict], target: pa.Schema, refused: list) -> list:
        try:
            return [pa.Table.from_pylist(rows, schema=target)]
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            if len(rows) <= 1:
                if rows:
                    self._refuse(refused, rows[0], _dict_row_problem(rows[0], target, str(exc)))
                return []
        half = len(rows) // 2
        return self._fit_dict_parts(rows[:half], target, refused) + self._fit_dict_parts(
            rows[half:], target, refused
        )

    # -- scans -------------------------------------------------------------------------

    def scan_tablet(
        self,
        tablet_id: str,
        projection: Sequence[str] | None = None,
        predicates: Sequence[tuple] = (),
        batch_rows_max: int = 0,
        ordered: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """Arrow batches of one tablet's matching rows, read at its leader: in key order,
        or not `ordered` in no promised order (the server merges less: Kudu's unordered
        scan)."""
        preds = _predicate_pbs(predicates)
        target = self.projected_schema(projection)
        last: Exception | None = None
        for round_, deadline in enumerate(_attempts(self.client.timeout_s)):
            tablet = next((t for t in self.tablets() if t.tablet_id == tablet_id), None)
            if tablet is None:
                raise errors.TabletNotFound(f"table {self.name} has no tablet {tablet_id}")
            for replica in tablet.leader_first():
                started = False
                timeout_s, patience_s = _attempt_timeouts(deadline, round_, time.monotonic())
                try:
                    for batch in self.client.tserver(replica).scan(
                        tablet_id,
                        projection=list(projection or ()),
                        predicates=preds,
                        batch_rows_max=batch_rows_max,
                        timeout_s=timeout_s,
                        patience_s=patience_s,
                        ordered=ordered,
                    ):
                        if batch.schema.names != target.names:
                            # Columns added, dropped or renamed since this handle looked
                            # (another client altered the table): look again.
                            if started:
                                raise errors.SchemaVersionMismatch(
                                    f"table {self.name}: its schema changed during the scan;"
                                    " scan again"
                                )
                            self.refresh()
                            target = self.projected_schema(projection)
                            if batch.schema.names != target.names:
                                raise errors.SchemaVersionMismatch(
                                    f"table {self.name}: tablet {tablet_id} has columns "
                                    f"{batch.schema.names}, the table {target.names}"
                                )
                        started = True
                        # One schema for every batch of the table, whatever the server says
                        # of nullability: callers concatenate them.
                        yield batch if batch.schema.equals(target) else batch.cast(target)
                    return
                except KeyRefused:
                    raise
                except (*LOCATION_ERRORS, *RETRIED_ERRORS) as err:
                    if started:
                        raise  # rows were already handed out: the caller must start over
                    last = err
            self.refresh()
        raise errors.Unavailable(
            f"no replica of tablet {tablet_id} could be scanned{_no_leader(last)}: {last}"
        )

    def scan_tablets(self, predicates: Sequence[tuple] = ()) -> list[TabletInfo]:
        """The tablets a scan with these predicates reads, in bucket order: only those whose
        hash bucket can hold a matching row when the predicates pin every key column (`=`,
        `in`, a narrow integer range: `partition.buckets_of_predicates`), else all. A scan
        that can match no row still reads one tablet, so that the tablet server checks the
        predicates and the scan fails or succeeds as an unpruned one would."""
        preds = _predicate_pbs(predicates)
        with self._lock:  # one consistent view: a refresh replaces all of these together
            tablets = list(self._tablets)
            key_fields = [self.arrow_schema.field(k) for k in self.key_columns]
            by_bucket = dict(self._by_bucket)
        if not tablets or not key_fields:
            return tablets
        pruning = _pruning_predicates(key_fields, preds)
        if pruning is None:
            return tablets
        num_buckets = tablets[0].num_buckets
        if set(by_bucket) != set(range(num_buckets)):
            return tablets  # locations that do not cover the buckets: take no chances
        buckets = buckets_of_predicates(
            [(f.name, f.type) for f in key_fields], pruning, num_buckets
        )
        if buckets is None:
            return tablets
        return [by_bucket[b] for b in sorted(buckets)] or tablets[:1]

    def scan(
        self,
        projection: Sequence[str] | None = None,
        predicates: Sequence[tuple] = (),
        *,
        ordered: bool = True,
    ) -> Iterator[pa.RecordBatch]:
        """Batches of every tablet the predicates can match (`scan_tablets`), in turn; each
        tablet's in key order, or not `ordered` in none (`scan_tablet`)."""
        for tablet in self.scan_tablets(predicates):
            yield from self.scan_tablet(tablet.tablet_id, projection, predicates, ordered=ordered)

    def projected_schema(self, projection: Sequence[str] | None = None) -> pa.Schema:
        schema = self.arrow_schema
        if not projection:
            return schema
        missing = [n for n in projection if n not in schema.names]
        if missing:
            raise errors.BadRequest(f"table {self.name} has no column(s) {missing}")
        if len(set(projection)) != len(projection):
            raise errors.BadRequest(f"projection {list(projection)} names a column twice")
        return pa.schema([schema.field(n) for n in projection])

    def to_arrow(
        self, projection: Sequence[str] | None = None, predicates: Sequence[tuple] = ()
    ) -> pa.Table:
        self.projected_schema(projection)  # an unknown column: refused before any scan
        batches = list(self.scan(projection, predicates))
        schema = batches[0].schema if batches else self.projected_schema(projection)
        if any(b.schema.names != schema.names for b in batches):
            raise errors.SchemaVersionMismatch(
                f"table {self.name}: its schema changed during the scan; scan again"
            )
        return pa.Table.from_batches(batches, schema=schema)

    def count(self) -> int:
        return sum(b.num_rows for b in self.scan(projection=self.key_columns[:1], ordered=False))


def _no_leader(last: Exception | None) -> str:
    """What a last NOT_LEADER without a hint means once retries are spent."""
    if isinstance(last, errors.NotLeader) and not last.leader_hint:
        return (
            " (no replica knows a leader: most of its voters may be down; "
            "`coordinator replication` says)"
        )
    return ""


def _predicate_pbs(predicates) -> list:
    """The scan's predicates, each a tuple (see `tablets.predicate`); BAD_REQUEST, naming
    the culprit, for anything else."""
    if isinstance(predicates, str | bytes | Mapping) or not isinstance(predicates, Iterable):
        raise errors.BadRequest(
            f"predicates must be a list of tuples like ('x', '>=', 3), got {predicates!r}"
        )
    out = []
    for p in predicates:
        if not isinstance(p, tuple | list):
            raise errors.BadRequest(f"predicate {p!r} is not a tuple like ('x', '>=', 3)")
        try:
            out.append(predicate(*p))
        except (TypeError, ValueError) as exc:
            raise errors.BadRequest(f"predicate {tuple(p)!r}: {exc}") from None
    return out


class _NoPruning(Exception):
    """A key predicate's value the tablet server would refuse or read otherwise than here."""


_INT_RANGES = {32: (-(2**31), 2**31 - 1), 64: (-(2**63), 2**63 - 1)}
_PRUNING_OPS = {
    PredicateOp.EQ: "=",
    PredicateOp.IN: "in",
    PredicateOp.LT: "<",
    PredicateOp.LE: "<=",
    PredicateOp.GT: ">",
    PredicateOp.GE: ">=",
    PredicateOp.IS_NULL: "is null",
    PredicateOp.IS_NOT_NULL: "is not null",
}


def _key_value(v, f: pa.Field):
    """A predicate value on key column `f` as the tablet server reads it
    (`tservers/tablet/schema.value_from_pb`, then the column's Arrow type): None for a
    null; _NoPruning where the server would refuse it."""
    kind = v.WhichOneof("v")
    if kind is None or kind == "is_null":
        return None
    t = f.type
    if pa.types.is_integer(t) or pa.types.is_timestamp(t):
        if kind != "int_value":
            raise _NoPruning
        low, high = _INT_RANGES[32 if pa.types.is_int32(t) else 64]
        if not low <= v.int_value <= high:
            raise _NoPruning
        return v.int_value
    if pa.types.is_floating(t):
        if kind == "int_value":
            return float(v.int_value)
        if kind != "double_value":
            raise _NoPruning
        return v.double_value
    if pa.types.is_boolean(t) and kind == "bool_value":
        return v.bool_value
    if pa.types.is_string(t) and kind == "string_value":
        return v.string_value
    if pa.types.is_binary(t) and kind == "binary_value":
        return v.binary_value
    raise _NoPruning


def _pruning_predicates(key_fields: list[pa.Field], preds: list) -> list | None:
    """The predicates on key columns as `partition.buckets_of_predicates` takes them, or
    None when one has a value the tablet server would refuse (no pruning: every tablet is
    asked, and refuses the scan as before)."""
    fields = {f.name: f for f in key_fields}
    out = []
    try:
        for p in preds:
            f = fields.get(p.column)
            if f is None:
                continue
            op = _PRUNING_OPS.get(p.op)
            if op is None:
                return None
            values = [_key_value(v, f) for v in p.values]
            if op not in ("in", "is null", "is not null") and (
                len(values) != 1 or values[0] is None
            ):
                return None  # a comparison with null, or not one value: refused by servers
            out.append((p.column, op, values))
    except _NoPruning:
        return None
    return out


def _attempts(timeout_s: float) -> Iterator[float]:
    """Rounds of a retried tablet-server call: until `timeout_s` has passed (two rounds at
    least), at most TSERVER_ATTEMPTS_MAX, with a jittered exponential backoff pause before
    each retry. Yields the call's deadline: `_attempt_timeouts` of it bounds each call of a
    round, so the whole call ends about `timeout_s` after it began, not a round later."""
    deadline = time.monotonic() + timeout_s
    for attempt in range(TSERVER_ATTEMPTS_MAX):
        if attempt:
            pause = min(BACKOFF_MAX_S, BACKOFF_INITIAL_S * (2 ** (attempt - 1)))
            pause = min(pause * random.uniform(0.5, 1.0), max(0.0, deadline - time.monotonic()))
            time.sleep(pause)
            if attempt > 1 and time.monotonic() >= deadline:
                return
        yield deadline


def _attempt_timeouts(deadline: float, round_: int, now: float) -> tuple[float, float]:
    """(timeout_s, patience_s) of one tablet-server call made at `now` in round `round_`
    (0 first) of a call that must end by `deadline`.

    The timeout bounds the whole of the call, the transfer and the server's work included:
    what is left before the deadline, so that a large write or the opening of a slow scan
    is never cut short while the server works on it (a write cut and resent is not applied
    twice, but its transfer and checks are paid again); past the deadline (the second round
    always runs) ATTEMPT_TIMEOUT_MIN_S.

    The patience bounds only the server's silence (`meta.SilenceWatch`): a hung leader (a
    SIGSTOPped process, its connection up) costs about twice the patience, 1 s in the first
    round, then the next replica is asked. It doubles each round (to 8 s), so that a server
    slow to answer even a ping on a loaded machine is not given up round after round."""
    timeout_s = max(ATTEMPT_TIMEOUT_MIN_S, deadline - now)
    return timeout_s, min(timeout_s, attempt_patience_s(round_))


class _TabletGone(Exception):
    """The tablet a block was routed to no longer belongs to the (refreshed) table."""


class _TableGone(Exception):
    """The table itself no longer exists (dropped under the session): every row of the
    block is refused at once, none is written."""

    def __init__(self, err: errors.NotFound) -> None:
        super().__init__(err.message)
        self.err = err


def _split_by_tablet(table: Table, data: pa.Table) -> list[tuple[TabletInfo, pa.Table]]:
    try:
        buckets = bucket_of_rows(data, table.key_columns, table.num_buckets())
    except ValueError as exc:
        raise errors.BadRequest(f"table {table.name}: {exc}") from None
    return [
        (
            table.tablet_for_bucket(bucket),
            data.filter(pc.equal(buckets, pa.scalar(bucket, pa.uint64()))),
        )
        for bucket in pc.unique(buckets).to_pylist()
    ]


def _cut(text: str, chars_max: int) -> str:
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


def _quote(value) -> str:
    """A value for a row error: its repr, cut to VALUE_REPR_CHARS_MAX characters."""
    return _cut(repr(value), VALUE_REPR_CHARS_MAX)


def _null_problem(name: str) -> str:
    return f"column {name!r} is null, which it cannot be"


def _value_problem(field: pa.Field, value, why: object) -> str:
    reason = _cut(str(why), ARROW_REASON_CHARS_MAX)
    return f"column {field.name!r} ({field.type}): value {_quote(value)} does not fit: {reason}"


def _arrow_row_problem(data: pa.Table, target: pa.Schema, why: str) -> str:
    """Why the one row of `data` does not fit `target`, naming every column whose value does
    not and the value's problem (Arrow's own cast error names no column); `why` when no
    single column is to blame."""
    problems = []
    for f in target:
        col = data.column(f.name)
        if col.null_count:
            if not f.nullable:
                problems.append(_null_problem(f.name))
            continue
        if col.type.equals(f.type):
            continue
        try:
            col.cast(f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            try:
                value = col[0].as_py()
            except (pa.ArrowInvalid, ValueError, UnicodeDecodeError):
                value = f"<{col.type}>"
            problems.append(_value_problem(f, value, exc))
    return "; ".join(problems) or why


def _dict_row_problem(row: dict, target: pa.Schema, why: str) -> str:
    """As _arrow_row_problem, for a row given as a dict."""
    problems = []
    for f in target:
        value = row.get(f.name)
        if value is None:
            if not f.nullable:
                problems.append(_null_problem(f.name))
            continue
        try:
            pa.array([value], type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            problems.append(_value_problem(f, value, exc))
    return "; ".join(problems) or why


def _server_row_problem(table: Table, row: dict, message: str) -> str:
    """A tablet server's refusal of one row, naming the column: the server names a key by
    its value only ("key 5 already exists in tablet ..."), so the key columns and their
    values go first, unless the message names a column of the table itself."""
    if any(f"column {name!r}" in message for name in table.arrow_schema.names):
        return message
    keys = table.key_columns
    named = ", ".join(f"{k!r} = {_quote(row.get(k))}" for k in keys)
    return f"key column{'s' if len(keys) != 1 else ''} {named}: {message}"


def _row_dicts(rows) -> list:
    """Rows given as Python objects: an iterable of mappings (one per row), as a list.
    Anything else is refused as a whole, naming what was given (a lone dict would
    otherwise be read as a sequence of its column names)."""
    if isinstance(rows, Mapping):
        raise errors.BadRequest("rows must be a list of dicts, one per row: got one dict")
    if isinstance(rows, str | bytes) or not isinstance(rows, Iterable):
        raise errors.BadRequest(
            f"rows must be a list of dicts or an Arrow table, got {type(rows).__name__}"
        )
    rows = list(rows)
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise errors.BadRequest(f"row {i} is a {type(row).__name__}, not a dict")
    return rows


@dataclass(slots=True)
class _Piece:
    """One write to send: an op's rows, and the seq of its request id once it has been sent
    (kept while its outcome is unknown, so that every resend, in any later flush, is the
    same write to the tablet)."""

    op: int
    rows: pa.Table
    seq: int | None = None


@dataclass(slots=True)
class _Pending:
    table: Table
    pieces: list[_Piece] = field(default_factory=list)
    rows: int = 0


class Session:
    """Buffers writes per tablet and sends them in batches. One per thread; a context manager.

    Flushes a tablet's buffer when it reaches `flush_rows_max` rows, everything when the
    oldest buffered row is older than `flush_interval_s` (checked on each write), and on
    flush() and close(). Row errors are collected in `errors`, never raised."""

    def __init__(self, client: Client, *, flush_rows_max: int, flush_interval_s: float) -> None:
        if not 0 < flush_rows_max <= SESSION_ROWS_MAX:
            raise errors.BadRequest(f"flush_rows_max must be 1..{SESSION_ROWS_MAX}")
        if not flush_interval_s >= 0:
            raise errors.BadRequest(f"flush_interval_s must be >= 0, got {flush_interval_s!r}")
        self.client = client
        self.flush_rows_max = flush_rows_max
        self.flush_interval_s = flush_interval_s
        self.errors: list[RowError] = []
        self.rows_written = 0
        self._pending: dict[tuple[str, str], _Pending] = {}
        self._oldest: float | None = None
        self._closed = False
        # Each write this session sends is (client id, seq), the same on every resend of it:
        # a tablet applies it at most once (design/client.md, "Resends").
        self._client_id = uuidlib.uuid4().bytes
        self._seq = 0
        self._unresolved: set[int] = set()  # seqs sent whose outcome is not known yet

    def insert(self, table: Table, rows) -> None:
        self._apply(table, OpType.INSERT, rows)

    def upsert(self, table: Table, rows) -> None:
        self._apply(table, OpType.UPSERT, rows)

    def update(self, table: Table, rows) -> None:
        self._apply(table, OpType.UPDATE, rows)

    def delete(self, table: Table, rows) -> None:
        # Only the key is read: other columns' values are neither checked nor sent.
        keys = table.key_columns
        if isinstance(rows, pa.RecordBatch):
            rows = pa.Table.from_batches([rows])
        if isinstance(rows, pa.Table):
            rows = rows.select([k for k in keys if k in rows.column_names])
        else:
            rows = [{k: r[k] for k in keys if k in r} for r in _row_dicts(rows)]
        self._apply(table, OpType.DELETE, rows)

    def _apply(self, table: Table, op: int, rows) -> None:
        if self._closed:
            raise errors.IllegalState("the session is closed")
        if isinstance(rows, pa.Table | pa.RecordBatch):
            given = rows.num_rows
        else:
            rows = _row_dicts(rows)
            given = len(rows)
        if not given:
            return  # nothing to write (an empty delete too)
        data, refused = table.fit(rows)
        missing = [k for k in table.key_columns if k not in data.column_names]
        if missing:
            raise errors.BadRequest(f"rows lack the key column(s) {missing}")
        for row, why in refused:  # row errors, as the server's refusals are
            self.errors.append(
                RowError(
                    OP_NAMES[op], row, "BAD_REQUEST", f"does not fit table {table.name}: {why}"
                )
            )
        if data.num_rows == 0:
            return
        full = []
        for tablet, part in _split_by_tablet(table, data):
            pending = self._pending.setdefault((table.name, tablet.tablet_id), _Pending(table))
            pending.pieces.append(_Piece(op, part))
            pending.rows += part.num_rows
            if pending.rows >= self.flush_rows_max:
                full.append((table.name, tablet.tablet_id))
        if self._oldest is None:
            self._oldest = time.monotonic()
        for key in full:
            self._flush_one(key)
        if self._oldest is not None and time.monotonic() - self._oldest >= self.flush_interval_s:
            self.flush()

    def pending_rows(self) -> int:
        return sum(p.rows for p in self._pending.values())

    def flush(self) -> list[RowError]:
        """Send everything buffered; returns the row errors of this flush."""
        before = len(self.errors)
        for key in list(self._pending):
            self._flush_one(key)
        self._oldest = None
        return self.errors[before:]

    def _flush_one(self, key: tuple[str, str]) -> None:
        """Send a tablet's pieces in order. A piece refused for a row is split in halves
        (new pieces, at the front) until the bad rows are isolated. When a send fails (its
        outcome unknown), that piece, with its request id, and the ones after it go back to
        the buffer as they are: the next flush or close resends exactly that write first, so
        nothing that landed is written again (design/client.md, "Resends")."""
        pending = self._pending.pop(key)
        _, tablet_id = key
        table, queue = pending.table, pending.pieces
        try:
            while queue:
                piece = queue[0]
                split = self._write_piece(table, tablet_id, piece)
                queue[:1] = split
        except BaseException:
            if queue:
                self._pending[key] = _Pending(table, queue, sum(p.rows.num_rows for p in queue))
            raise

    def _write_piece(self, table: Table, tablet_id: str, piece: _Piece) -> list[_Piece]:
        """Send one piece; returns what replaces it at the front of the queue: nothing when
        it is done (written, or its one row refused and reported), its two halves when the
        tablet refused a row of it. Raises when its outcome is unknown (piece.seq kept)."""
        op, rows = piece.op, piece.rows
        if piece.seq is None:
            piece.seq = self._next_seq()
        try:
            self._send(table, tablet_id, op, rows, piece.seq)
        except _TabletGone:
            # The tablet is no more (the table recreated or repartitioned): the rows are
            # routed again by the current partitioning, as new writes.
            self._unresolved.discard(piece.seq)
            self._reroute(table, op, rows, 0)
            return []
        except _TableGone as gone:
            self._unresolved.discard(piece.seq)
            self._table_gone(op, rows, gone)
            return []
        except ROW_ERRORS as err:  # refused whole: nothing of it applied
            self._unresolved.discard(piece.seq)
            if rows.num_rows == 1:
                self._row_refused(table, op, rows, err)
                return []
            half = rows.num_rows // 2
            return [_Piece(op, rows.slice(0, half)), _Piece(op, rows.slice(half))]
        self._unresolved.discard(piece.seq)
        self.rows_written += rows.num_rows
        return []

    def _reroute(self, table: Table, op: int, rows: pa.Table, reroutes: int) -> None:
        if reroutes >= 2:
            raise errors.TabletNotFound(
                f"table {table.name}: tablets keep changing under the writes"
            ) from None
        for tablet, part in _split_by_tablet(table, rows):
            self._write(table, tablet.tablet_id, op, part, reroutes + 1)

    def _table_gone(self, op: int, rows: pa.Table, gone: _TableGone) -> None:
        # No row of it can be written: one error per row at once, without splitting.
        err = gone.err
        self.errors.extend(
            RowError(OP_NAMES[op], row, err.status_name, err.message) for row in rows.to_pylist()
        )

    def _row_refused(self, table: Table, op: int, rows: pa.Table, err: errors.RpcError) -> None:
        row = rows.to_pylist()[0]
        message = _server_row_problem(table, row, err.message)
        self.errors.append(RowError(OP_NAMES[op], row, err.status_name, message))

    def _write(self, table: Table, tablet_id: str, op: int, rows: pa.Table, reroutes: int) -> None:
        """Write rows rerouted to another tablet, isolating rows the tablet refuses by
        splitting. Each send is a new write (a failure raises: nothing is kept to resend)."""
        seq = self._next_seq()
        try:
            self._send(table, tablet_id, op, rows, seq)
            self.rows_written += rows.num_rows
        except _TabletGone:
            self._reroute(table, op, rows, reroutes)
        except _TableGone as gone:
            self._table_gone(op, rows, gone)
        except ROW_ERRORS as err:
            if rows.num_rows == 1:
                self._row_refused(table, op, rows, err)
                return
            half = rows.num_rows // 2
            self._write(table, tablet_id, op, rows.slice(0, half), reroutes)
            self._write(table, tablet_id, op, rows.slice(half), reroutes)
        finally:
            self._unresolved.discard(seq)

    def _next_seq(self) -> int:
        self._seq += 1
        self._unresolved.add(self._seq)
        return self._seq

    def _send(self, table: Table, tablet_id: str, op: int, rows: pa.Table, seq: int) -> None:
        # One logical write, one request id for all its resends (in this call and in later
        # flushes). The tablet may forget every seq below the lowest one whose outcome this
        # session does not know yet.
        request_id = RequestIdPB(
            client_id=self._client_id, seq=seq, first_incomplete_seq=min(self._unresolved)
        )
        last: Exception | None = None
        for round_, deadline in enumerate(_attempts(self.client.timeout_s)):
            tablet = next((t for t in table.tablets() if t.tablet_id == tablet_id), None)
            if tablet is None:
                raise _TabletGone(tablet_id)
            for replica in tablet.leader_first():
                ts = self.client.tserver(replica)
                timeout_s, patience_s = _attempt_timeouts(deadline, round_, time.monotonic())
                try:
                    ts.write(
                        tablet_id,
                        [(op, rows)],
                        timeout_s=timeout_s,
                        patience_s=patience_s,
                        request_id=request_id,
                    )
                    return
                except errors.SchemaVersionMismatch as err:  # the schema changed: fetch it again
                    last = err
                    timeout_s, patience_s = _attempt_timeouts(deadline, round_, time.monotonic())
                    try:
                        ts.schema(
                            tablet_id, refresh=True, timeout_s=timeout_s, patience_s=patience_s
                        )
                    except KeyRefused:
                        raise
                    except (*LOCATION_ERRORS, *RETRIED_ERRORS) as fetch_err:
                        last = fetch_err  # nothing was written: the next replica, or round
                except KeyRefused:
                    raise
                except LOCATION_ERRORS as err:
                    last = err
                except RETRIED_ERRORS as err:
                    # Unknown outcome: resent with the same request id, which the tablet applies
                    # at most once; a resend of a write that did land gets the first answer
                    # (an insert is not ALREADY_EXISTS, an upsert not applied again).
                    last = err
            try:
                table.refresh()
            except errors.NotFound as err:
                raise _TableGone(err) from None
        raise errors.Unavailable(
            f"write to tablet {tablet_id} failed after retries{_no_leader(last)}: {last}"
        )

    def close(self) -> None:
        """Send what is buffered; then the session takes no more writes. If the flush
        fails, the rows stay buffered and close() may be called again."""
        self.flush()
        self._closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def rows_of(batches: Iterable[pa.RecordBatch]) -> list[dict]:
    """Rows as dicts, for small results."""
    out: list[dict] = []
    for b in batches:
        out.extend(b.to_pylist())
    return out
