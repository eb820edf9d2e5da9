"""The coordinator's in-memory catalog, rebuilt from the log (architecture 4.4).

Tables, tablets, tablet servers, pending operations, client sessions (exactly-once results)
and the last Lease record (for leader hints). Only the operations' `apply` functions change
the logged part, always in log order; heartbeats change the unlogged part (last heartbeat,
tablet reports), which lives on every node but is acted on by the leader only.

Values are frozen dataclasses replaced on change; protobuf fields held by them are never
mutated after they are stored (copies are made before any change). `lock` guards everything;
readers take it briefly.
"""

from __future__ import annotations

import enum
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import ClassVar

from rpc import schema_rules
from rpc.protocols import coordinator_pb2 as pb

TABLE_NAME_BYTES_MAX = 256
COLUMN_NAME_BYTES_MAX = 256
COLUMNS_MAX = schema_rules.COLUMNS_MAX  # one definition with the tablet servers'
TABLETS_PER_TABLE_MAX = 256
REPLICATION_FACTOR_MAX = 7
SERVER_UUID_BYTES_MAX = 64
ADDRESS_BYTES_MAX = 256
CLIENT_ID_BYTES_MAX = 128
# Exactly-once bookkeeping: results kept per client, clients kept, superseded requests carried.
SESSION_RESULTS_PER_CLIENT_MAX = 64
SESSION_CLIENTS_MAX = 10_000
SUPERSEDED_REQUESTS_MAX = 16


class TableState(enum.Enum):
    CREATING = "CREATING"
    RUNNING = "RUNNING"
    ALTERING = "ALTERING"
    DROPPING = "DROPPING"


class ServerState(enum.Enum):
    LIVE = "LIVE"
    DOWN = "DOWN"


@dataclass(frozen=True, slots=True)
class TableInfo:
    table_id: str
    name: str
    schema: pb.Schema
    replication_factor: int
    tablet_ids: tuple[str, ...]
    state: TableState
    create_record_id: int  # the live CreateTable record (STARTED or DONE)
    alter_record_id: int = 0  # the live AlterTable DONE record, 0 if none
    pending_op_id: int = 0  # an operation on this table between STARTED and DONE
    # Requests whose results live in this table's records (carried when those are invalidated).
    requests: tuple[tuple[str, int, int], ...] = ()  # (client_id, seq, schema_version)
    replication_record_id: int = 0  # the live SetReplication record, 0 if none


@dataclass(frozen=True, slots=True)
class TabletInfo:
    tablet_id: str
    table_id: str
    hash_bucket: int
    num_buckets: int
    replicas: tuple[str, ...]  # the placement of its CreateTable record (the initial config)
    # Placed servers its CreateTable DONE record lists as skipped (down, or refusing): the
    # creation was not seen to succeed there, so the replica may or may not exist
    # (coordinator/replication.py creates the ones that do not, see `missing_replicas`).
    skipped: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TabletReportInfo:
    """Unlogged: the last heartbeat report about a tablet, preferably from its leader (a
    leader's report replaces any report of an older or equal term; a follower's report is
    kept only while no leader has reported)."""

    leader_uuid: str
    term: int
    config_index: int
    config_uuids: tuple[str, ...]
    reported_at: float
    reporter_uuid: str = ""
    role: str = ""
    member_types: tuple[str, ...] = ()  # of config_uuids, same order; () when not reported

    @property
    def from_leader(self) -> bool:
        return self.role == "LEADER" and self.reporter_uuid == self.leader_uuid


@dataclass(frozen=True, slots=True)
class ServerInfo:
    uuid: str
    address: str
    state: ServerState
    record_id: int  # its live EnlistServer or ServerDown record


@dataclass(frozen=True, slots=True)
class PrincipalInfo:
    """A principal (design/security.md section 3), as its live Principal record says.

    `roles` and `state` are what the last operation decided; while that operation is
    pending (`pending_op_id`), `in_force_roles` and `in_force_active` are the more
    restrictive of the states before and after it (coordinator/ops/principals.py)."""

    name: str
    kind: str  # user, tserver, coordinator
    public_key: str  # Z85, 40 characters
    roles: tuple[str, ...]
    state: str  # active, revoked
    record_id: int  # its live Principal record (STARTED while pending, else DONE)
    pending_op_id: int = 0
    in_force_roles: tuple[str, ...] = ()
    in_force_active: bool = False
    requests: tuple[tuple[str, int], ...] = ()  # (client_id, seq) of its records, carried
    expires_unix_ms: int = 0  # a join token's deadline (the leader's wall clock), else 0
    join_token: str = ""  # a tablet server admitted by a join token: the token's name


@dataclass(frozen=True, slots=True)
class PendingOp:
    op_id: int
    kind: str  # the LogRecord oneof name
    record: pb.LogRecord  # the STARTED record


@dataclass(frozen=True, slots=True)
class OpResult:
    """What a retried request gets back: the operation's id and, once done, its result."""

    op_id: int
    kind: str
    done: bool
    table_id: str = ""
    schema_version: int = 0
    principal: str = ""  # the principal's name (principal operations)


class _Watched(dict):
    """A dict that reports each key it changes (the catalog's replica counts follow its
    `tablets` and `tablet_reports` this way, whatever code changes them)."""

    __slots__ = ("_changed",)

    def __init__(self, data=(), changed=None) -> None:
        super().__init__(data)
        self._changed = changed or (lambda _k: None)

    def __setitem__(self, key, value) -> None:
        super().__setitem__(key, value)
        self._changed(key)

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self._changed(key)

    def pop(self, key, *default):
        had = key in self
        value = super().pop(key, *default)
        if had:
            self._changed(key)
        return value

    def popitem(self):
        key, value = super().popitem()
        self._changed(key)
        return key, value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args, **kwargs) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self) -> None:
        keys = list(self)
        super().clear()
        for key in keys:
            self._changed(key)


@dataclass
class Catalog:
    """Everything a coordinator node knows; see the module docstring."""

    applied_id: int = 0
    tables: dict[str, TableInfo] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # name -> table id
    tablets: dict[str, TabletInfo] = field(default_factory=dict)
    servers: dict[str, ServerInfo] = field(default_factory=dict)
    # server uuid -> (retired, its live RetireServer record): retire-tserver's state, kept
    # apart from `servers` (the record can precede the server's live EnlistServer record)
    retirements: dict[str, tuple[bool, int]] = field(default_factory=dict)
    pending: OrderedDict[int, PendingOp] = field(default_factory=OrderedDict)
    # name -> principal (logged: Principal records, coordinator/ops/principals.py), and the
    # public key of every principal not revoked -> its name (one principal per key)
    principals: dict[str, PrincipalInfo] = field(default_factory=dict)
    principal_keys: dict[str, str] = field(default_factory=dict)
    sessions: OrderedDict[str, OrderedDict[int, OpResult]] = field(default_factory=OrderedDict)
    last_lease: tuple[int, pb.Lease] | None = None
    # Unlogged state, fed by heartbeats (time.monotonic() of this node).
    heartbeats: dict[str, float] = field(default_factory=dict)
    # Each tablet server's HTTP address (its own page, /metrics), as its heartbeats say.
    http_addresses: dict[str, str] = field(default_factory=dict)
    tablet_reports: dict[str, TabletReportInfo] = field(default_factory=dict)
    # Each tablet server's file system as its last heartbeat said (pb.DiskReport); a server
    # whose report says full (free at or below its reserve) gets no new replica.
    disks: dict[str, pb.DiskReport] = field(default_factory=dict)
    # (server uuid, tablet id) -> CAS config index of replicas to delete (coordinator/replication)
    strays: dict[tuple[str, str], int] = field(default_factory=dict)
    # (server uuid, tablet id) -> the older schema version that replica reported while its
    # table is RUNNING at a newer one: AlterTable skipped it (its server down) or it came
    # back from a restart behind; coordinator/replication.py brings it to the table's
    # schema (`alter_stale`). Leader only, bounded like `strays`.
    stale_schemas: dict[tuple[str, str], int] = field(default_factory=dict)
    # tablet id -> uuids of the servers that report their replica of it FAILED (the policy
    # replaces them as it replaces replicas on dead servers)
    failed_replicas: dict[str, set[str]] = field(default_factory=dict)
    # Tablet servers whose full tablet report this node took since it started, or since it
    # started or stopped serving (cleared with strays and failed_replicas): the others are
    # asked for one (their reports are incremental, tservers/heartbeat.py).
    full_reports: set[str] = field(default_factory=set)
    # tablet id -> server uuid -> the last report of that replica (pb.TabletReport), to judge
    # again a replica whose report does not change when its tablet's leader reports.
    replica_reports: dict[str, dict[str, pb.TabletReport]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    changed: threading.Condition = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)
        # Replicas per server (`replica_counts`), kept as `tablets` and `tablet_reports`
        # change: each tablet's counted replicas, and their sum per server. CreateTable
        # places by them; recounting every tablet per create made creating 10,000 tables
        # quadratic (issue 28).
        self._counted: dict[str, tuple[str, ...]] = {}
        self._counts: dict[str, int] = {}
        self._recount_all()

    def __setattr__(self, name: str, value) -> None:
        if name == "tables":  # (a change of any table: `tables_generation`)
            object.__setattr__(self, name, _Watched(value, self._table_changed))
            self._table_changed(None)
            return
        if name in ("tablets", "tablet_reports"):
            object.__setattr__(self, name, _Watched(value, self._recount))
            self._location_changed(None)
            self._recount_all()
            return
        if name in ("names", "servers", "principals"):  # read by tablet-location answers
            object.__setattr__(self, name, _Watched(value, self._location_changed))
            self._location_changed(None)
            return
        object.__setattr__(self, name, value)

    def _recount_all(self) -> None:
        if "_counts" in self.__dict__:  # (not while __init__ sets the fields)
            for tablet_id in set(self._counted) | set(self.tablets):
                self._recount(tablet_id)

    def _recount(self, tablet_id: str) -> None:
        self._location_changed(tablet_id)
        if "_counts" not in self.__dict__ or "tablet_reports" not in self.__dict__:
            return  # (being built)
        self._touch(tablet_id)
        old = self._counted.pop(tablet_id, ())
        new = self.current_replicas(tablet_id) if tablet_id in self.tablets else ()
        if old == new:
            if new:
                self._counted[tablet_id] = new
            return
        for uuid in old:
            left = self._counts[uuid] - 1
            if left:
                self._counts[uuid] = left
            else:
                del self._counts[uuid]
        for uuid in new:
            self._counts[uuid] = self._counts.get(uuid, 0) + 1
        if new:
            self._counted[tablet_id] = new

    # ------------------------------------------------------------ queries

    def live_servers(self) -> list[ServerInfo]:
        return sorted(
            (s for s in self.servers.values() if s.state is ServerState.LIVE),
            key=lambda s: s.uuid,
        )

    def retired_servers(self) -> frozenset[str]:
        return frozenset(u for u, (retired, _) in self.retirements.items() if retired)

    def placeable_servers(self) -> list[ServerInfo]:
        """Live servers that may get new replicas: not retired, and not full (free space at
        or below the reserve, as its last heartbeat said: unlogged, the leader's view)."""
        retired = self.retired_servers()
        full = self.full_servers()
        return [s for s in self.live_servers() if s.uuid not in retired and s.uuid not in full]

    def full_servers(self) -> frozenset[str]:
        """Servers whose last heartbeat said their file system is at or below the reserve."""
        return frozenset(u for u, d in self.disks.items() if d.full)

    def current_replicas(self, tablet_id: str) -> tuple[str, ...]:
        """The tablet's replicas: the committed config its leader (or, until a leader
        reports, a replica) last reported; the placement decided at creation before any
        report."""
        report = self.tablet_reports.get(tablet_id)
        if report is not None and report.config_uuids:
            return report.config_uuids
        tablet = self.tablets.get(tablet_id)
        return tablet.replicas if tablet is not None else ()

    def replica_counts(self) -> dict[str, int]:
        """Replicas per known server (current_replicas of every tablet), O(servers)."""
        return {uuid: self._counts.get(uuid, 0) for uuid in self.servers}

    def replica_counts_recounted(self) -> dict[str, int]:
        """`replica_counts` computed afresh from every tablet (tests check one by the other)."""
        counts = {uuid: 0 for uuid in self.servers}
        for tablet in self.tablets.values():
            for uuid in self.current_replicas(tablet.tablet_id):
                if uuid in counts:
                    counts[uuid] += 1
        return counts

    def table_by_name(self, name: str) -> TableInfo | None:
        table_id = self.names.get(name)
        return self.tables.get(table_id) if table_id else None

    def session_result(self, client_id: str, seq: int) -> OpResult | None:
        results = self.sessions.get(client_id)
        return results.get(seq) if results else None

    def record_refs(self) -> set[int]:
        """Ids of the log records the logged state rests on: each must still be live.

        A record the replay applied can later be invalidated by one the replay never reads
        (itself invalidated before it was read); one of these ids being dead then shows that
        the state built incrementally has parted from the live log's."""
        refs = set(self.pending)
        for t in self.tables.values():
            refs.update((t.create_record_id, t.alter_record_id, t.replication_record_id))
        refs.update(s.record_id for s in self.servers.values())
        refs.update(record_id for _, record_id in self.retirements.values())
        refs.update(p.record_id for p in self.principals.values())
        refs.discard(0)
        return refs

    def adopt_logged(self, rebuilt: Catalog) -> None:
        """Take the logged state of `rebuilt` (replayed afresh from the live log); the
        unlogged state stays, minus the reports of tablets that no longer exist."""
        self.applied_id = max(self.applied_id, rebuilt.applied_id)
        self.tables = rebuilt.tables
        self.names = rebuilt.names
        self.tablets = rebuilt.tablets
        self.servers = rebuilt.servers
        self.retirements = rebuilt.retirements
        self.principals = rebuilt.principals
        self.principal_keys = rebuilt.principal_keys
        self.pending = rebuilt.pending
        self.sessions = rebuilt.sessions
        self.last_lease = rebuilt.last_lease
        for tablet_id in [t for t in self.tablet_reports if t not in self.tablets]:
            del self.tablet_reports[tablet_id]

    # ------------------------------------------------------------ changes used by apply

    def record_session(self, request_id: pb.RequestId, result: OpResult) -> None:
        if not request_id.client_id or request_id.seq == 0:
            return
        results = self.sessions.get(request_id.client_id)
        if results is None:
            results = self.sessions[request_id.client_id] = OrderedDict()
        self.sessions.move_to_end(request_id.client_id)
        results[request_id.seq] = result
        while len(results) > SESSION_RESULTS_PER_CLIENT_MAX:
            results.popitem(last=False)
        while len(self.sessions) > SESSION_CLIENTS_MAX:
            self.sessions.popitem(last=False)

    def put_table(self, table: TableInfo) -> None:
        old = self.tables.get(table.table_id)
        if old is not None and self.names.get(old.name) == old.table_id:
            del self.names[old.name]
        self.tables[table.table_id] = table
        self.names[table.name] = table.table_id

    def remove_table(self, table_id: str) -> None:
        table = self.tables.pop(table_id, None)
        if table is None:
            return
        if self.names.get(table.name) == table_id:
            del self.names[table.name]
        for tablet_id in table.tablet_ids:
            self.tablets.pop(tablet_id, None)
            self.tablet_reports.pop(tablet_id, None)

    # ------------------------------------------------------------ what changed (issue 28)
    # The idle leader's replication round must not look at every tablet twice a second
    # (coordinator/replication.py): the tablets whose entry in `tablets` or
    # `tablet_reports` changed since its last look (`take_touched`), the tables changed
    # since then (`take_touched_tables`) and a generation number of `tables` (any change of
    # any table), and the tablets with replicas their CreateTable skipped
    # (`skipped_tablets`), all kept as those dicts change, by whatever code.

    def _table_changed(self, table_id) -> None:
        self.__dict__["_tables_generation"] = self.__dict__.get("_tables_generation", 0) + 1
        self._location_changed(table_id)
        d = self._indexes()
        if table_id is None or len(d["_tables_touched"]) >= TOUCHED_MAX:
            d["_tables_touched_overflow"] = True  # the whole dict replaced: every table
        else:
            d["_tables_touched"].add(table_id)

    # Moves at every change of `tables`, `names`, `tablets`, `tablet_reports`, `servers` or
    # `principals` (their values are replaced, never changed in place): everything a
    # tablet-location answer is built from (coordinator/locations.py). An answer checked
    # valid at one generation is valid for as long as it stands. A plain attribute, read
    # on every lookup; written only here (past __setattr__).
    locations_generation: ClassVar[int] = 0

    def _location_changed(self, _key) -> None:
        self.__dict__["locations_generation"] = self.locations_generation + 1

    @property
    def tables_generation(self) -> int:
        """Changes once any table is added, replaced or removed."""
        return self.__dict__.get("_tables_generation", 0)

    def _indexes(self) -> dict:
        d = self.__dict__
        if "_touched" not in d:  # (made on first use: a dataclass field would be reset)
            d["_touched"] = set()
            d["_touched_overflow"] = False
            d["_skipped"] = set()
            d["_tables_touched"] = set()
            d["_tables_touched_overflow"] = False
        return d

    def _touch(self, tablet_id: str) -> None:
        self._indexes()
        if len(self._touched) < TOUCHED_MAX:
            self._touched.add(tablet_id)
        else:
            self._touched_overflow = True
        tablet = self.tablets.get(tablet_id)
        if tablet is not None and tablet.skipped:
            self._skipped.add(tablet_id)
        else:
            self._skipped.discard(tablet_id)

    def take_touched(self) -> set[str] | None:
        """The tablets whose `tablets` or `tablet_reports` entry changed since the last call
        (added, replaced or removed); None when more than TOUCHED_MAX did (look at all)."""
        d = self._indexes()
        touched, overflow = d["_touched"], d["_touched_overflow"]
        d["_touched"], d["_touched_overflow"] = set(), False
        return None if overflow else touched

    def take_touched_tables(self) -> set[str] | None:
        """The ids of the tables added, replaced or removed in `tables` since the last call;
        None when the whole dict was replaced or more than TOUCHED_MAX changed (all of them).
        A table changed at creation, at its DONE, at an alter, a factor change or a drop."""
        d = self._indexes()
        tables, overflow = d["_tables_touched"], d["_tables_touched_overflow"]
        d["_tables_touched"], d["_tables_touched_overflow"] = set(), False
        return None if overflow else tables

    def skipped_tablets(self) -> frozenset[str]:
        """The tablets whose TabletInfo lists skipped replicas, O(those)."""
        skipped = self._indexes()["_skipped"]
        gone = {t for t in skipped if not getattr(self.tablets.get(t), "skipped", ())}
        skipped -= gone  # (removed with a whole `tablets` replaced, not counted there)
        return frozenset(skipped)

    def skipped_tablets_recounted(self) -> frozenset[str]:
        """`skipped_tablets` computed afresh from every tablet (tests check one by the other)."""
        return frozenset(t for t, info in self.tablets.items() if info.skipped)


TOUCHED_MAX = 100_000  # tablets listed as changed between two looks; beyond, "all of them"
