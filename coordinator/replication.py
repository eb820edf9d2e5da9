"""The re-replication policy (architecture 4.5): the leader keeps every tablet at its table's
replication factor with live voters.

Not a logged operation. Every `interval_s` the leader's `replication` thread looks at each
tablet of every RUNNING table as its leader last reported it in heartbeats (committed config,
its index, leader) and decides at most one config change per tablet (`plan`, pure):

- a member on a bad server (DOWN, removed, retired, or the source of a requested move),
  or whose server reports its replica FAILED (it stays offline: its log cannot be trusted
  to vote or to be copied over), is replaced: ADD_SERVER(target, NON_VOTER, promote=true,
  cas=reported index) to the tablet's leader, the target being the requested one for a
  move, else the least loaded live server not retired and not hosting the tablet; the
  tablet leader copies the tablet to the target and promotes it to VOTER by itself once
  caught up;
- once the live voters reach the replication factor, the bad member is removed
  (REMOVE_SERVER(cas));
- live voters above the factor (after ChangeReplicationFactor down) are removed one at a time
  (never the leader, the most loaded server first); a non-voter on a bad server is removed.

Every call carries the CAS on the committed config index, so a repeated or stale decision is
refused (CAS_FAILED, ALREADY_IN_PROGRESS, ILLEGAL_STATE, NOT_LEADER, ...) and simply retried
on a later round with a fresh report: the policy repeats until the tablet is healthy. Work
per round is bounded (`changes_per_round_max` calls, `fetches_per_round_max` leader queries)
and every call has a deadline.

MoveReplica requests are kept in the leader's memory (not logged): they only mark replicas
as bad for the policy above. A new leader forgets them; the operator command is idempotent
and is simply issued again (documented in design/coordinator.md). RetireTabletServer is a
logged operation (`ops/retire_server`): a retired server is bad for the policy and never a
target, on every leader, until it is removed or the retirement is cancelled.

Stray replicas are deleted by the same loop. A replica is stray when a tablet server reports
it READY and either its tablet is unknown to the leader's catalog (its table was dropped: a
copy or config change in flight when DropTable listed the replicas can leave one behind) or
its server is no longer in the committed config its tablet's leader reported, the replica's
own committed config being older (evicted: replaced while its server was down, or removed).
The heartbeat handler notes them (`stray_of`, pure), only on the serving leader; each round
re-checks them against the catalog and sends at most `deletes_per_round_max` DeleteTablet
calls. An evicted replica is deleted with the CAS `cas_config_index` = the config index it
reported, so a replica added back since then is left alone (CAS_FAILED).

Replicas never created are created by the same loop (`create_missing`): a CreateTable
whose placed servers were all down when it completed lists every replica as skipped in its
DONE record and leaves a tablet that exists nowhere (no leader, no copy source). Once such
a server is LIVE and shows (ListTablets) no trace of the tablet, the tablet is created there
with its placement as the initial config; see `missing_candidates`, `missing_replicas` and
design/coordinator.md section 10 for why this can never stand in for a replica that existed.

Replicas left at an older schema version are altered by the same loop (`alter_stale`,
Kudu's master re-sending alters): AlterTable skips a replica whose server is not LIVE when
it completes, and a follower at an older version than a write it applies fails after
tablet.SCHEMA_CATCH_UP_S. The heartbeat handler notes a READY replica reporting a schema
version below its RUNNING table's (`stale_schema_of`, pure; the tables being altered are
left to their AlterTable, whose call brings such a replica up itself), and each round looks
at the replica reports of every table whose schema changed (`_sweep_altered`: a replica
whose report does not change is never sent again). Each round re-checks the noted replicas
against the catalog and brings at most `catch_ups_per_round_max` on LIVE servers, noted at
least STALE_GRACE_S ago (a report may lag its alter), to the table's schema in one step
(GetSchema, then AlterSchema with the CAS on the replica's version, the table's version
and the column ids in the replica's numbering: coordinator/gateway.py `catch_up_request`).

The heartbeat reports carry member types when the tablet server sends them
(TabletReport.config_member_types); otherwise the policy asks the tablet's leader
(TServer.ListTablets) for the committed config of the tablets it has to look at closely.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from coordinator.catalog import (
    Catalog,
    ServerInfo,
    ServerState,
    TableInfo,
    TableState,
    TabletInfo,
    TabletReportInfo,
)
from coordinator.gateway import catch_up, partition_to_tserver, schema_to_tserver
from rpc.client import RpcClient, Transport
from rpc.errors import AlreadyExists, BadRequest, CasFailed, NotFound, RpcError
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

logger = logging.getLogger(__name__)

ADD = "ADD"
REMOVE = "REMOVE"
CLIENTS_MAX = 4096
JOIN_TIMEOUT_S = 10.0
MOVES_MAX = 100_000
REPEAT_LOG_S = 60.0
# Tablets a round reads per hold of the catalog lock, and looks at between two yields of the
# GIL (`_snapshot`, `run_round`): about a millisecond of work each.
SNAPSHOT_CHUNK = 500
LOGGED_MAX = 10_000
SETTLED_MAX = 100_000
RECENT_ACTIONS_MAX = 200
# A requested move is given up (cancelled, logged at WARNING, listed in the console's
# recent changes) when its target refused or failed the copy: its replica of the tablet is
# FAILED or COPY_FAILED (a tablet server reports COPY_FAILED for a while after a copy onto
# it failed and was cleaned up, e.g. NO_SPACE: the announced size does not fit above its
# reserve), or it is full; or when its target was added this many times (added, removed
# again as bad, added ...) without the move finishing.
MOVE_ADDS_MAX = 3
FAILED_ROLES = frozenset({"FAILED", "COPY_FAILED"})


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    interval_s: float = 0.5
    call_timeout_s: float = 5.0
    changes_per_round_max: int = 8
    fetches_per_round_max: int = 16
    deletes_per_round_max: int = 16
    creates_per_round_max: int = 16
    catch_ups_per_round_max: int = 8  # replicas brought to their table's schema a round
    # A round looks at the tablets that changed or needed a look the round before; every
    # tablet at least this often, and whenever a table or the live or retired servers change.
    full_pass_s: float = 10.0


@dataclass(frozen=True, slots=True)
class Member:
    uuid: str
    voter: bool


@dataclass(frozen=True, slots=True)
class TabletView:
    """A tablet as its leader reported it."""

    tablet_id: str
    replication_factor: int
    leader_uuid: str
    config_index: int
    members: tuple[Member, ...]


@dataclass(frozen=True, slots=True)
class Move:
    tablet_id: str
    from_uuid: str
    to_uuid: str = ""  # empty: the policy picks the least loaded live server


@dataclass(frozen=True, slots=True)
class Action:
    kind: str  # ADD or REMOVE
    tablet_id: str
    leader_uuid: str
    peer_uuid: str
    cas_config_index: int
    reason: str


def plan(
    view: TabletView,
    live: frozenset[str],
    load: dict[str, int],
    move: Move | None = None,
    retiring: frozenset[str] = frozenset(),
    failed: frozenset[str] = frozenset(),
    full: frozenset[str] = frozenset(),
) -> Action | None:
    """At most one config change that brings the tablet closer to health (pure). `failed`:
    the servers whose replica of this tablet is FAILED; `full`: servers at their reserved
    free space (never a new replica's target; their replicas stay)."""

    def bad(uuid: str) -> bool:
        return (
            uuid not in live
            or uuid in retiring
            or uuid in failed
            or (move is not None and uuid == move.from_uuid)
        )

    if view.leader_uuid not in live:
        return None  # no leader to ask: wait for an election and its report
    members = {m.uuid for m in view.members}
    voters = [m.uuid for m in view.members if m.voter]
    good_voters = [u for u in voters if not bad(u)]
    non_voters = [m.uuid for m in view.members if not m.voter]
    rf = view.replication_factor

    def action(kind: str, peer: str, reason: str) -> Action:
        return Action(kind, view.tablet_id, view.leader_uuid, peer, view.config_index, reason)

    for uuid in non_voters:
        if bad(uuid):
            return action(REMOVE, uuid, "non-voter on a bad server")
    if len(good_voters) < rf:
        # A voter on a dead server (DOWN, or its replica FAILED) in a config already above
        # the factor (a replacement promoted before the failure, a move under way) goes
        # first: the majority it takes to commit shrinks, and no live replica is lost. A
        # config at or below the factor keeps it until a replacement is promoted.
        dead = sorted(u for u in voters if u not in live or u in failed)
        if dead and len(voters) > rf and dead[0] != view.leader_uuid:
            return action(REMOVE, dead[0], "a dead voter in a config above its factor")
        if any(not bad(u) for u in non_voters):
            return None  # the leader is copying / promoting a new replica
        candidates = [
            u
            for u in live
            if u not in members
            and u not in retiring
            and u not in full
            and u not in failed  # its copy of this tablet just failed (or its replica did)
            and u != view.leader_uuid
        ]
        if move is not None and move.to_uuid:
            candidates = [move.to_uuid] if move.to_uuid in candidates else []
        if not candidates:
            return None
        target = min(candidates, key=lambda u: (load.get(u, 0), u))
        return action(ADD, target, f"{len(good_voters)} good voters, factor {rf}")
    bad_voters = sorted(
        (u for u in voters if bad(u)), key=lambda u: (u in live, u == view.leader_uuid, u)
    )
    if bad_voters:
        return action(REMOVE, bad_voters[0], "replaced")
    if len(good_voters) > rf:
        excess = [u for u in good_voters if u != view.leader_uuid]
        if excess:
            victim = max(excess, key=lambda u: (load.get(u, 0), u))
            return action(REMOVE, victim, f"{len(good_voters)} voters, factor {rf}")
    return None


def unhealthy_reason(
    view: TabletView | None,
    live: frozenset[str],
    retiring: frozenset[str],
    failed: frozenset[str] = frozenset(),
    move: Move | None = None,
) -> str | None:
    """Why a tablet is not healthy, for an operator (pure); None if it is. `view` None: no
    leader has reported it yet."""
    if view is None:
        return "no report from a leader of it yet"
    parts = []
    good_voters = 0
    voters = alive = 0  # voters, and those on live servers with a sound replica
    for m in view.members:
        short = m.uuid[:12]
        if m.voter:
            voters += 1
            alive += m.uuid in live and m.uuid not in failed
        if m.uuid in failed:
            parts.append(f"replica on {short} FAILED")
        elif m.uuid not in live:
            parts.append(f"{'voter' if m.voter else 'NON_VOTER'} on {short}, a DOWN server")
        elif m.uuid in retiring:
            parts.append(f"replica on {short}, a server being retired")
        elif move is not None and m.uuid == move.from_uuid:
            parts.append(
                f"replica on {short} being moved to {move.to_uuid[:12] or 'another server'}"
            )
        elif not m.voter:
            parts.append(f"NON_VOTER on {short} being copied, then promoted")
        else:
            good_voters += 1
    if good_voters != view.replication_factor or parts:
        parts.append(f"{good_voters} good voters of {view.replication_factor}")
    if alive < voters // 2 + 1:
        parts.append(
            f"UNAVAILABLE: {alive} of its {voters} voters live, not a majority (no leader,"
            " no write) until enough come back; it cannot be healed before"
        )
    elif view.leader_uuid not in live:
        parts.append(f"its last leader {view.leader_uuid[:12]} is DOWN: an election is due")
    if not parts and move is not None:
        parts.append(f"a move off {move.from_uuid[:12]} requested")
    return "; ".join(parts) if parts else None


def by_tablet(moves: dict[tuple[str, str], Move]) -> dict[str, Move]:
    """One pending move per tablet (the first requested)."""
    out: dict[str, Move] = {}
    for m in moves.values():
        out.setdefault(m.tablet_id, m)
    return out


def is_healthy(
    view: TabletView,
    live: frozenset[str],
    retiring: frozenset[str],
    failed: frozenset[str] = frozenset(),
) -> bool:
    """As many members as the factor, every one a voter on a live server, not being retired,
    its replica not FAILED (one judgement with `unhealthy_reason`)."""
    return unhealthy_reason(view, live, retiring, failed) is None


def view_of(
    tablet_id: str, rf: int, report: TabletReportInfo, member_types: tuple[str, ...]
) -> TabletView:
    members = tuple(
        Member(u, (member_types[i] if i < len(member_types) else "VOTER") != "NON_VOTER")
        for i, u in enumerate(report.config_uuids)
    )
    return TabletView(tablet_id, rf, report.leader_uuid, report.config_index, members)


def missing_candidates(
    tablet: TabletInfo,
    table: TableInfo,
    report: TabletReportInfo | None,
    servers: Mapping[str, ServerInfo],
) -> tuple[str, ...]:
    """The placed servers to ask whether they host `tablet` at all (pure): its CreateTable
    DONE record skipped them, they are LIVE, and nothing shows the tablet has a group that
    could heal it. () when the tablet is not one the policy may create replicas of:

    - a table neither RUNNING nor ALTERING: one being created (its CreateTable is still
      pending: it makes the replicas itself) or dropped (nothing of it must come back);
      a table altered since its creation is created at its current schema and version
      (`_create`), and an ALTER still pending then finds it at that version (CAS_FAILED
      with the new version is success, coordinator/gateway.py) or, created later, not
      found (the operation stays pending and its retry alters it);
    - a leader reported: its group works, and a leader copies the tablet to a member of
      its config that lacks it (TABLET_NOT_FOUND -> tablet copy), or the policy replaces it;
    - a placed server removed: the initial config could not be given whole (its address
      is gone), and every replica must start from the same one.
    """
    if table.state not in (TableState.RUNNING, TableState.ALTERING):
        return ()
    if not tablet.skipped or (report is not None and report.leader_uuid):
        return ()
    if any(u not in servers for u in tablet.replicas):
        return ()
    out = []
    for uuid in tablet.skipped:
        if uuid not in tablet.replicas or servers[uuid].state is not ServerState.LIVE:
            continue  # a server down may host it: wait for it to come back and say so
        if report is not None and report.config_uuids and uuid not in report.config_uuids:
            continue  # replaced in the config since: a replica there would be a stray
        out.append(uuid)
    return tuple(out)


def missing_replicas(
    tablet_id: str, candidates: Sequence[str], hosted: Mapping[str, frozenset[str] | None]
) -> tuple[str, ...]:
    """The candidates on which `tablet_id` is to be created now, fresh (pure): each LIVE
    server's own answer (`hosted`: the ids of every replica it has, in any state,
    tombstones and copies included; None: no answer) shows it never had the tablet.

    Safe because the server itself is the witness: it lists every replica on its disk
    before its port answers (tservers/server.py; ListTablets names those still opening,
    and CreateTablet of one still opening is UNAVAILABLE), a tombstone stays forever, and
    a wiped server comes back under a new uuid. A fresh
    replica of the initial config on a server that never had one is a member that missed
    the creation, which Raft allows (an empty log wins no vote against a member with
    entries, and anything ever committed is on a majority of that config)."""
    return tuple(u for u in candidates if hosted.get(u) is not None and tablet_id not in hosted[u])


ORPHAN = -1  # a stray whose tablet the catalog no longer knows: deleted without a CAS
# A replica noted at an older schema is altered once noted this long: the replicas an
# AlterTable just altered report their new version at their next heartbeat (0.5 s), after
# the sweep of the altered table may have noted them from their reports before.
STALE_GRACE_S = 1.5
STRAYS_MAX = 10_000
UNHEALTHY_LISTED_MAX = 100  # tablets named in ReplicationStatus (the counts cover all)


def stray_of(
    server_uuid: str,
    report: pb.TabletReport,
    tablet_known: bool,
    leader_report: TabletReportInfo | None,
) -> int | None:
    """None if the reported replica belongs where it is; else the CAS to delete it with
    (ORPHAN: no CAS). Pure; see the module docstring."""
    if report.data_state != "READY":
        return None  # a tombstone, or a copy in progress (reported again once READY)
    if not tablet_known:
        return ORPHAN
    if (
        leader_report is None
        or not leader_report.from_leader
        or server_uuid == leader_report.leader_uuid
        or server_uuid in leader_report.config_uuids
    ):
        return None
    if report.config_index >= leader_report.config_index:
        return None  # not behind the leader's config: maybe newer than what we know
    return report.config_index


def stale_schema_of(report: pb.TabletReport, table: TableInfo | None, stray: bool) -> bool:
    """Whether the reported replica is to be brought to its table's schema (pure): READY,
    not FAILED, not stray, reporting a schema version (0: not said) below its table's, the
    table RUNNING (one being altered is left to its AlterTable)."""
    if table is None or table.state is not TableState.RUNNING or stray:
        return False
    if report.data_state != "READY" or report.role in FAILED_ROLES:
        return False
    return 0 < report.schema_version < table.schema.version


def note_schema(catalog: Catalog, server_uuid: str, report: pb.TabletReport) -> None:
    """Keep `catalog.stale_schemas` up to date with this replica's report (catalog lock
    held; bounded): noted while stale, forgotten once current or no longer to be altered."""
    key = (server_uuid, report.tablet_id)
    tablet = catalog.tablets.get(report.tablet_id)
    table = catalog.tables.get(tablet.table_id) if tablet is not None else None
    if not stale_schema_of(report, table, key in catalog.strays):
        catalog.stale_schemas.pop(key, None)
    elif key in catalog.stale_schemas or len(catalog.stale_schemas) < STRAYS_MAX:
        catalog.stale_schemas[key] = report.schema_version


def note_table_schemas(catalog: Catalog, table: TableInfo) -> None:
    """`note_schema` for the last report of every replica of `table` (catalog lock held):
    after its schema changed, for the replicas whose reports do not change (a server that
    was down while the alter completed and is back with the same report)."""
    for tablet_id in table.tablet_ids:
        for server_uuid, report in catalog.replica_reports.get(tablet_id, {}).items():
            note_schema(catalog, server_uuid, report)


def note_report(catalog: Catalog, server_uuid: str, report: pb.TabletReport) -> None:
    """Called by the serving leader's heartbeat handler (catalog lock held): keep
    `catalog.strays`, `failed_replicas` and `stale_schemas` up to date with this report
    (bounded)."""
    cas = stray_of(
        server_uuid,
        report,
        report.tablet_id in catalog.tablets,
        catalog.tablet_reports.get(report.tablet_id),
    )
    key = (server_uuid, report.tablet_id)
    if cas is None:
        catalog.strays.pop(key, None)
    elif key in catalog.strays or len(catalog.strays) < STRAYS_MAX:
        catalog.strays[key] = cas
    note_schema(catalog, server_uuid, report)
    failed = catalog.failed_replicas.get(report.tablet_id)
    if report.role in FAILED_ROLES:
        if failed is None and len(catalog.failed_replicas) < STRAYS_MAX:
            failed = catalog.failed_replicas[report.tablet_id] = set()
        if failed is not None:
            failed.add(server_uuid)
    elif failed is not None:
        failed.discard(server_uuid)
        if not failed:
            del catalog.failed_replicas[report.tablet_id]


@dataclass
class _Counters:
    sent: int = 0
    refused: int = 0
    strays_deleted: int = 0
    replicas_created: int = 0
    schemas_caught_up: int = 0  # replicas brought to their table's schema (`alter_stale`)
    last_error: dict[str, str] = field(default_factory=dict)


def _type_name(member_type: int) -> str:
    return "NON_VOTER" if member_type == ts.MemberType.NON_VOTER else "VOTER"


class ReplicationManager:
    """The leader-only loop and the in-memory move requests. `serving()` says whether this
    node is the serving leader."""

    def __init__(
        self,
        catalog: Catalog,
        caller_uuid: str,
        serving: Callable[[], bool],
        config: ReplicationConfig | None = None,
        *,
        privileged_key: bytes | None = None,
        curve=None,
    ) -> None:
        """`curve` (rpc.keys.ClientCurve): calls to tablet servers as a CURVE client."""
        self.catalog = catalog
        self.caller_uuid = caller_uuid
        self._curve = curve
        # Signs every call (ChangeConfig and DeleteTablet are privileged: rpc/privileged.py).
        self._privileged_key = privileged_key
        self.serving = serving
        self.config = config or ReplicationConfig()
        self._lock = threading.Lock()
        self._moves: dict[tuple[str, str], Move] = {}  # (tablet_id, from_uuid) -> move
        self._move_adds: dict[tuple[str, str], int] = {}  # ADDs sent for a pending move
        self.moves_cancelled = 0
        # tablet -> the non-voter target of a cancelled move: bad for the policy (removed)
        # until it is no longer a member.
        self._abandoned: dict[str, str] = {}
        self.counters = _Counters()
        # The last config changes sent, (wall-clock time, action, outcome), for the web console.
        self.recent_actions: collections.deque[tuple[float, Action, str]] = collections.deque(
            maxlen=RECENT_ACTIONS_MAX
        )
        # (tablet, kind, peer, outcome) -> when last logged at INFO: a change the policy
        # repeats every round (a tablet that cannot heal) is logged once a REPEAT_LOG_S.
        self._logged: dict[tuple[str, str, str, str], float] = {}
        self._was_serving = False
        # (tablet, server) whose skipped replica the server showed it has, or that was
        # created: not asked again in this leader term (forgotten when serving changes).
        self._settled: set[tuple[str, str]] = set()
        # The round's own bookkeeping (`_look_at`): when it last looked at every tablet, what
        # it looked at them under, and the tablets to look at again in the next round.
        self._full_at: float | None = None
        self._full_key: tuple | None = None
        self._carried: set[str] = set()
        # `_sweep_altered`: the tables' generation and (schema version, state) it last saw.
        self._swept_generation: int | None = None
        self._swept: dict[str, tuple[int, TableState]] = {}
        self._stale_since: dict[tuple[str, str], tuple[int, float]] = {}  # `alter_stale`
        self._transport: Transport | None = None
        self._clients: dict[str, RpcClient] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._transport = Transport(name="replication", curve=self._curve)
        self._thread = threading.Thread(target=self._run, name="replication", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                logger.error("replication thread did not stop in %.0f s", JOIN_TIMEOUT_S)
        if self._transport is not None:
            self._transport.close()

    def _run(self) -> None:
        while not self._stop.wait(self.config.interval_s):
            serving = self.serving()
            if serving != self._was_serving:
                with self._lock:  # requests of an earlier term are not ours to drive
                    self._moves.clear()
                    self._move_adds.clear()
                    self._abandoned.clear()
                    self._settled.clear()
                    self.counters = _Counters()
                    self._full_at = None  # the first round of a term looks at every tablet
                    self._swept_generation = None  # and at every table's replica schemas
                    self._swept = {}
                    self._stale_since = {}
                with self.catalog.lock:  # noted before this node served: not trusted
                    self.catalog.strays.clear()
                    self.catalog.stale_schemas.clear()
                    self.catalog.failed_replicas.clear()
                    self.catalog.full_reports.clear()  # so every server reports in full again
                self._was_serving = serving
            if not serving:
                continue
            try:
                self.run_round()
            except Exception:  # a bug here must not stop the policy for good
                logger.exception("replication round failed")

    # ------------------------------------------------------------ requests (leader)

    def move_replica(self, request: pb.MoveReplicaRequest) -> pb.MoveReplicaResponse:
        with self.catalog.lock:
            if request.tablet_id not in self.catalog.tablets:
                raise NotFound(f"no tablet {request.tablet_id!r}")
            replicas = self.catalog.current_replicas(request.tablet_id)
            if request.from_uuid not in replicas:
                raise BadRequest(
                    f"tablet {request.tablet_id} has no replica on {request.from_uuid}"
                )
            target_added = False
            if request.to_uuid:
                server = self.catalog.servers.get(request.to_uuid)
                if server is None or server.state is not ServerState.LIVE:
                    raise BadRequest(f"target {request.to_uuid} is not a live tablet server")
                if request.to_uuid in self.catalog.retired_servers():
                    raise BadRequest(f"target {request.to_uuid} is retired")
                if request.to_uuid == request.from_uuid:
                    raise BadRequest("a move needs two different servers")
                if request.to_uuid in self.catalog.failed_replicas.get(request.tablet_id, ()):
                    raise BadRequest(
                        f"target {request.to_uuid} refused or failed a copy of tablet "
                        f"{request.tablet_id} (NO_SPACE or an error; see its log): the move "
                        "is cancelled; free space there or choose another target"
                    )
                table = self.catalog.tables.get(self.catalog.tablets[request.tablet_id].table_id)
                factor = table.replication_factor if table is not None else len(replicas)
                target_added = request.to_uuid in replicas and len(replicas) > factor
            else:
                takers = [
                    s.uuid for s in self.catalog.placeable_servers() if s.uuid not in replicas
                ]
            key = (request.tablet_id, request.from_uuid)
        with self._lock:
            if request.to_uuid and request.to_uuid in replicas:
                # The target already in the config: the move is under way (asked again, or
                # again after a coordinator failover: the target added, the source still
                # there) and the source goes next. A target that was a member before is
                # refused: the move could never add it.
                same = self._moves.get(key)
                if not target_added and (same is None or same.to_uuid != request.to_uuid):
                    raise BadRequest(
                        f"tablet {request.tablet_id} already has a replica on {request.to_uuid}"
                    )
            if not request.to_uuid and not takers and key not in self._moves:
                raise BadRequest(
                    f"no server can take a replica of tablet {request.tablet_id}: every live "
                    "tablet server not retired hosts one already"
                )
            if len(self._moves) >= MOVES_MAX and key not in self._moves:
                raise BadRequest(f"more than {MOVES_MAX} moves pending")
            self._moves[key] = Move(request.tablet_id, request.from_uuid, request.to_uuid)
            self._move_adds.pop(key, None)
        return pb.MoveReplicaResponse()

    def hosted_replicas(self, uuid: str) -> pb.RetireServerResponse:
        """The replicas still on `uuid` (RetireServer's answer, after its logged part)."""
        with self.catalog.lock:
            if uuid not in self.catalog.servers:
                raise NotFound(f"no tablet server {uuid!r}")
            return pb.RetireServerResponse(replicas=self.catalog.replica_counts().get(uuid, 0))

    def status(self) -> pb.ReplicationStatusResponse:
        entries, _live, retiring, load, moves, failed = self._snapshot()
        views = {t: self._view(t, e) for t, e in entries.items()}
        response = pb.ReplicationStatusResponse()
        with self.catalog.lock:
            live = frozenset(s.uuid for s in self.catalog.live_servers())
            response.tablets = sum(len(t.tablet_ids) for t in self.catalog.tables.values())
        moves_by_tablet = by_tablet(moves)
        for tablet_id, view in sorted(views.items()):
            with self.catalog.lock:
                report = self.catalog.tablet_reports.get(tablet_id)
                info = self.catalog.tablets.get(tablet_id)
                table = self.catalog.tables.get(info.table_id) if info is not None else None
            if report is None:
                view = None
            # Member types not learnt count as VOTER: with as many members as the factor,
            # a NON_VOTER among them is only being promoted.
            reason = unhealthy_reason(
                view,
                live,
                retiring,
                failed.get(tablet_id, frozenset()),
                moves_by_tablet.get(tablet_id),
            )
            if reason is None:
                response.healthy_tablets += 1
                continue
            if view is None and info is not None and info.skipped:
                reason = (
                    f"no leader reported; its CreateTable skipped {len(info.skipped)} of its "
                    f"{len(info.replicas)} replicas (servers down then): those that never "
                    "came to exist are created once their servers are back"
                )
            if view is None:
                response.unknown += 1  # no leader report yet
            else:
                response.under_replicated += 1
            if len(response.unhealthy) < UNHEALTHY_LISTED_MAX:
                response.unhealthy.add(
                    tablet_id=tablet_id,
                    table_name=table.name if table is not None else "",
                    reason=reason,
                )
        for m in moves.values():
            response.moves.add(tablet_id=m.tablet_id, from_uuid=m.from_uuid, to_uuid=m.to_uuid)
        response.retiring.extend(sorted(u for u in retiring if load.get(u, 0)))
        response.changes_sent = self.counters.sent
        response.changes_refused = self.counters.refused
        with self.catalog.lock:
            response.strays = len(self.catalog.strays)
            response.stale_schemas = len(self.catalog.stale_schemas)
        response.strays_deleted = self.counters.strays_deleted
        response.schemas_caught_up = self.counters.schemas_caught_up
        return response

    # ------------------------------------------------------------ the policy

    def _snapshot(self, only: set[str] | None = None):
        """The report with a leader of every tablet of every RUNNING table (of those in
        `only` when given), with its table's factor (None: no report with a leader), and
        what a round needs besides. O(tablets), kept to dict lookups (a view is built only
        for a tablet that needs a look, `_view`), under the catalog lock SNAPSHOT_CHUNK
        tablets at a time: a pass over 10,000 tablets in one hold stalled every request for
        15-20 ms. Each tablet's entry is read whole; the round acts on what it read as it
        always did (a config change is conditional on the config index it saw)."""
        with self.catalog.lock:
            live = frozenset(s.uuid for s in self.catalog.live_servers())
            load = self.catalog.replica_counts()
            tables = list(self._tablets_of(only))
            failed = {t: frozenset(u) for t, u in self.catalog.failed_replicas.items()}
            retired = self.catalog.retired_servers()
        entries: dict[str, tuple[int, TabletReportInfo] | None] = {}
        i = 0
        while i < len(tables):
            with self.catalog.lock:
                reports = self.catalog.tablet_reports
                held = 0
                while i < len(tables) and held < SNAPSHOT_CHUNK:
                    table, tablet_ids = tables[i]
                    i += 1
                    held += len(tablet_ids)
                    if table.state is not TableState.RUNNING:
                        continue
                    rf = table.replication_factor
                    for tablet_id in tablet_ids:
                        report = reports.get(tablet_id)
                        if report is None or not report.leader_uuid or not report.config_uuids:
                            entries[tablet_id] = None
                        else:
                            entries[tablet_id] = (rf, report)
            if i < len(tables):
                time.sleep(0)  # let the requests waiting for the lock or the GIL in
        with self._lock:
            watched = {k[0] for k in self._moves} | set(self._abandoned)
        with self.catalog.lock:
            replicas = {t: self.catalog.current_replicas(t) for t in watched}
        with self._lock:
            # Finished moves are forgotten.
            for key in [k for k in self._moves if k[1] not in replicas.get(k[0], (k[1],))]:
                del self._moves[key]
                self._move_adds.pop(key, None)
            for t in [t for t, u in self._abandoned.items() if u not in replicas.get(t, (u,))]:
                del self._abandoned[t]
            moves = dict(self._moves)
        return entries, live, retired, load, moves, failed

    def _tablets_of(self, only: set[str] | None):
        """(table, its tablet ids) of every table, or of the tablets in `only` (lock held)."""
        if only is None:
            return ((table, table.tablet_ids) for table in self.catalog.tables.values())
        out = []
        for tablet_id in only:
            tablet = self.catalog.tablets.get(tablet_id)
            table = self.catalog.tables.get(tablet.table_id) if tablet is not None else None
            if table is not None and tablet_id in table.tablet_ids:
                out.append((table, (tablet_id,)))
        return out

    def _look_at(self) -> tuple[set[str] | None, set[str] | None]:
        """The tablets this round looks at, and the tables changed since the last round (for
        its schema sweep, `_sweep_altered`); None: every tablet, every table (issue 28: an
        idle leader looked at each of 10,000 tablets twice a second to find nothing to do).

        Those whose tablet or report changed since the last round, the tablets of every
        table changed since then (created, altered, its factor changed: a tablet healthy on
        its unchanged report may no longer be), those the last round had to look at closely
        or did not reach (bounded per round), and those with a move, an abandoned move
        target or a FAILED replica. Every tablet in the first round of a term, when the
        live or retired servers changed, when too many changed to list, and at least every
        `full_pass_s` whatever happened. (A table created used to mean every tablet: at
        10,000 tables, a pass of 15-20 ms under the catalog lock every round while tables
        were being created, stalling the creates themselves.)
        """
        now = time.monotonic()
        with self.catalog.lock:
            touched = self.catalog.take_touched()
            tables = self.catalog.take_touched_tables()
            key = (
                frozenset(s.uuid for s in self.catalog.live_servers()),
                self.catalog.retired_servers(),
            )
            failed = set(self.catalog.failed_replicas)
            of_tables: set[str] = set()
            for table_id in tables or ():
                table = self.catalog.tables.get(table_id)
                if table is not None:
                    of_tables.update(table.tablet_ids)
        if (
            touched is None
            or tables is None
            or self._full_at is None
            or key != self._full_key
            or now - self._full_at >= self.config.full_pass_s
        ):
            self._full_at, self._full_key = now, key
            return None, None
        with self._lock:
            watched = {k[0] for k in self._moves} | set(self._abandoned)
        return touched | of_tables | self._carried | watched | failed, tables

    @staticmethod
    def _view(tablet_id: str, entry: tuple[int, TabletReportInfo] | None) -> TabletView | None:
        if entry is None:
            return None
        rf, report = entry
        return view_of(tablet_id, rf, report, report.member_types)

    def run_round(self) -> int:
        """One pass over the tablets that may need a change (`_look_at`); returns the number
        of config changes sent."""
        look, tables_changed = self._look_at()
        entries, live, retiring, load, moves, failed_of = self._snapshot(look)
        moves_by_tablet = by_tablet(moves)
        fetched: dict[str, dict[str, ts.TabletReportPB] | None] = {}
        sent = 0
        items = sorted(entries.items())
        carried: set[str] = set()  # looked at closely, or not reached: again next round
        for i, (tablet_id, entry) in enumerate(items):
            if sent >= self.config.changes_per_round_max or self._stop.is_set():
                carried.update(t for t, _ in items[i:])
                break
            if i % SNAPSHOT_CHUNK == SNAPSHOT_CHUNK - 1:
                time.sleep(0)  # a pass over every tablet: the GIL to the requests now and then
            if entry is None:
                continue
            rf, first = entry
            if first.leader_uuid not in live:
                continue  # wait for a live leader's report
            move = moves_by_tablet.get(tablet_id)
            failed = failed_of.get(tablet_id, frozenset())
            uuids = first.config_uuids
            if (
                move is None
                and not failed
                and len(uuids) == rf
                and all(u in live and u not in retiring for u in uuids)
                and "NON_VOTER" not in first.member_types[: len(uuids)]
            ):
                # Nothing to do whatever the member types are: with as many members as
                # the factor, all good, a NON_VOTER among them is being promoted anyway.
                continue
            carried.add(tablet_id)
            view = self._view(tablet_id, entry)
            assert view is not None
            with self.catalog.lock:
                report = self.catalog.tablet_reports.get(tablet_id)
            if report is None:
                continue
            if report.member_types:
                view = view_of(tablet_id, view.replication_factor, report, report.member_types)
            else:  # ask the tablet's leader (bounded per round)
                view = self._leader_view(view, fetched)
                if view is None:
                    continue
            with self.catalog.lock:
                full = self.catalog.full_servers()
            if move is not None and self._give_up(move, view, failed, full):
                move = None
            with self._lock:
                abandoned = self._abandoned.get(tablet_id)
            if abandoned:
                failed = failed | {abandoned}
            action = plan(view, live, load, move, retiring, failed, full)
            if action is None:
                continue
            if self._execute(action):
                if move is not None and action.kind == ADD:
                    with self._lock:
                        key = (move.tablet_id, move.from_uuid)
                        if key in self._moves:
                            self._move_adds[key] = self._move_adds.get(key, 0) + 1
                sent += 1
                delta = 1 if action.kind == ADD else -1
                load[action.peer_uuid] = load.get(action.peer_uuid, 0) + delta
        self._carried = carried
        self.create_missing()
        self.delete_strays()
        self._sweep_altered(tables_changed)
        self.alter_stale()
        return sent

    # ------------------------------------------------------------ replicas never created

    def _give_up(
        self, move: Move, view: TabletView, failed: frozenset[str], full: frozenset[str]
    ) -> bool:
        """Cancel `move` when its target refused or failed the copy, or was added
        MOVE_ADDS_MAX times; True when cancelled (the target, if still a non-voter member,
        is then removed by the policy as a non-voter on a bad server)."""
        key = (move.tablet_id, move.from_uuid)
        with self._lock:
            adds = self._move_adds.get(key, 0)
        members = {m.uuid: m.voter for m in view.members}
        target = move.to_uuid
        why = ""
        if target and target in failed:
            why = f"its target {target} refused or failed the tablet copy (NO_SPACE or error)"
        elif target and target in full and not members.get(target, False):
            why = f"its target {target} is at or below its reserved free space"
        elif adds >= MOVE_ADDS_MAX and not (target and members.get(target, False)):
            why = f"its target was added {adds} times and never caught up"
        if not why:
            return False
        with self._lock:
            if self._moves.get(key) != move:
                return False
            del self._moves[key]
            self._move_adds.pop(key, None)
            self.moves_cancelled += 1
            if target in members and not members[target] and len(self._abandoned) < MOVES_MAX:
                self._abandoned[move.tablet_id] = target
        text = f"move of tablet {move.tablet_id} off {move.from_uuid} cancelled: {why}"
        logger.warning("%s", text)
        self.counters.last_error[move.tablet_id] = text
        self.recent_actions.append(
            (
                time.time(),
                Action("MOVE", move.tablet_id, view.leader_uuid, target, view.config_index, why),
                "cancelled",
            )
        )
        return True

    def create_missing(self) -> int:
        """Create the replicas that a CreateTable skipped and that never came to exist
        (`missing_candidates`, `missing_replicas`); returns the number created.

        A CreateTable whose every placed server was down when it completed left a tablet
        with no replica at all: no leader can ever be elected and no copy has a source.
        Its DONE record lists the skipped replicas; once such a server is LIVE again, it is
        asked (ListTablets) and, if it has no trace of the tablet, the tablet is created
        there with the placement as its initial config, exactly as the CreateTable would
        have, at the table's schema of the moment (altered since: its current version and
        column ids, re-read right before the call). Not logged: any leader re-derives it
        from the DONE record, and a repeat is harmless (asked first; CreateTablet of an
        existing tablet is ALREADY_EXISTS).
        Bounded: `fetches_per_round_max` servers asked, `creates_per_round_max` creates."""
        with self.catalog.lock:
            servers = dict(self.catalog.servers)
            work: list[tuple[TabletInfo, TableInfo, tuple[str, ...]]] = []
            # Only the tablets with skipped replicas (kept by the catalog), not every tablet
            # of every table each round (issue 28).
            for table, (tablet_id,) in self._tablets_of(set(self.catalog.skipped_tablets())):
                tablet = self.catalog.tablets[tablet_id]
                if not tablet.skipped:
                    continue
                candidates = tuple(
                    u
                    for u in missing_candidates(
                        tablet, table, self.catalog.tablet_reports.get(tablet_id), servers
                    )
                    if (tablet_id, u) not in self._settled
                )
                if candidates:
                    work.append((tablet, table, candidates))
        hosted: dict[str, frozenset[str] | None] = {}
        created = 0
        for tablet, table, candidates in sorted(work, key=lambda w: w[0].tablet_id):
            if created >= self.config.creates_per_round_max or self._stop.is_set():
                break
            for uuid in candidates:
                if uuid not in hosted and len(hosted) < self.config.fetches_per_round_max:
                    hosted[uuid] = self._hosted(servers[uuid])
                ids = hosted.get(uuid)
                if ids is not None and tablet.tablet_id in ids:
                    self._settle(tablet.tablet_id, uuid)
            for uuid in missing_replicas(tablet.tablet_id, candidates, hosted):
                if not self.serving():  # a leader woken past its lease must not create
                    return created
                with self.catalog.lock:  # the schema as of now: an ALTER may have come
                    now = self.catalog.tables.get(table.table_id)
                if now is None or now.state not in (TableState.RUNNING, TableState.ALTERING):
                    break  # dropped meanwhile
                table = now
                if self._create(tablet, table, servers, uuid):
                    created += 1
                    self._settle(tablet.tablet_id, uuid)
        return created

    def _settle(self, tablet_id: str, uuid: str) -> None:
        if len(self._settled) >= SETTLED_MAX:
            self._settled.clear()  # asked again: harmless
        self._settled.add((tablet_id, uuid))

    def _hosted(self, server: ServerInfo) -> frozenset[str] | None:
        """The ids of every replica the server has, in any state; None if it did not say."""
        try:
            answer = self._client(server.address).call(
                server.uuid,
                "TServer.ListTablets",
                ts.ListTabletsRequest(),
                ts.ListTabletsResponse,
                timeout_s=self.config.call_timeout_s,
                idempotent=True,
            )
        except RpcError as e:
            logger.info("ListTablets on %s failed: %s", server.uuid, e)
            return None
        return frozenset(r.tablet_id for r in answer.tablets)

    def _create(
        self, tablet: TabletInfo, table: TableInfo, servers: Mapping[str, ServerInfo], uuid: str
    ) -> bool:
        server = servers[uuid]
        request = ts.CreateTabletRequest(
            tablet_id=tablet.tablet_id,
            table_id=table.table_id,
            table_name=table.name,
            schema=schema_to_tserver(table.schema),
            partition=partition_to_tserver(
                pb.Partition(hash_bucket=tablet.hash_bucket, num_buckets=tablet.num_buckets)
            ),
        )
        request.config.opid_index = -1  # the initial config: the placement, every one a voter
        for peer in tablet.replicas:
            request.config.peers.add(
                uuid=peer, address=servers[peer].address, member_type=ts.MemberType.VOTER
            )
        logger.warning(
            "tablet %s (table %s): no replica was created on %s (its CreateTable skipped it "
            "and the server has no trace of it): creating it, empty",
            tablet.tablet_id,
            table.name,
            uuid,
        )
        try:
            self._client(server.address).call(
                uuid,
                "TServer.CreateTablet",
                request,
                ts.CreateTabletResponse,
                timeout_s=self.config.call_timeout_s,
                idempotent=True,
            )
        except AlreadyExists:
            return True  # created meanwhile (a copy, or an earlier call whose answer was lost)
        except RpcError as e:
            logger.warning("tablet %s: creating it on %s failed: %s", tablet.tablet_id, uuid, e)
            return False
        self.counters.replicas_created += 1
        return True

    # ------------------------------------------------------------ stray replicas

    def delete_strays(self) -> int:
        """Delete up to `deletes_per_round_max` stray replicas, each re-checked against the
        catalog first; returns the number deleted."""
        with self.catalog.lock:
            strays = list(self.catalog.strays.items())[: self.config.deletes_per_round_max]
        deleted = 0
        for (server_uuid, tablet_id), cas in strays:
            if self._stop.is_set():
                break
            with self.catalog.lock:
                self.catalog.strays.pop((server_uuid, tablet_id), None)
                known = tablet_id in self.catalog.tablets
                leader_report = self.catalog.tablet_reports.get(tablet_id)
                server = self.catalog.servers.get(server_uuid)
            if server is None or server.state is not ServerState.LIVE:
                continue
            if cas == ORPHAN:
                if known:
                    continue
                why = "its table was dropped"
            else:
                if (
                    not known
                    or leader_report is None
                    or (
                        server_uuid in leader_report.config_uuids
                        or server_uuid == leader_report.leader_uuid
                        or cas >= leader_report.config_index
                    )
                ):
                    continue
                why = f"evicted: not in config {leader_report.config_index}"
            if self._delete_stray(server, tablet_id, cas, why):
                deleted += 1
        return deleted

    def _delete_stray(self, server, tablet_id: str, cas: int, why: str) -> bool:
        request = ts.DeleteTabletRequest(tablet_id=tablet_id)
        if cas != ORPHAN:
            request.cas_config_index = cas
        logger.info("tablet %s: deleting the stray replica on %s (%s)", tablet_id, server.uuid, why)
        try:
            self._client(server.address).call(
                server.uuid,
                "TServer.DeleteTablet",
                request,
                ts.DeleteTabletResponse,
                timeout_s=self.config.call_timeout_s,
                idempotent=True,  # deleting a tombstone is a no-op; the CAS guards the rest
            )
        except RpcError as e:
            # CAS_FAILED (added back), ILLEGAL_STATE (copying), TABLET_NOT_FOUND, a timeout:
            # the next heartbeat reports it again if it is still stray.
            logger.info("tablet %s: deleting the stray replica on %s refused: %s",
                        tablet_id, server.uuid, e)  # fmt: skip
            return False
        self.counters.strays_deleted += 1
        return True

    # ------------------------------------------------------------ replicas at an old schema

    def _sweep_altered(self, changed: set[str] | None) -> None:
        """Note the stale replicas of every table whose schema version or state changed since
        the last look (`note_table_schemas`): O(tables changed) when the round's look named
        them (`changed`, from `_look_at`); else (None) O(1) when no table changed since the
        last full sweep, O(tables) when one did."""
        with self.catalog.lock:
            if self._swept_generation is None:  # (a first sweep, of a term: every table)
                changed = None
            if changed is None:
                generation = self.catalog.tables_generation
                if generation == self._swept_generation:
                    return
                tables = list(self.catalog.tables.values())
                seen: dict[str, tuple[int, TableState]] = {}
            else:
                for table_id in changed:
                    if table_id not in self.catalog.tables:
                        self._swept.pop(table_id, None)  # dropped
                tables = [t for i in changed if (t := self.catalog.tables.get(i)) is not None]
                seen = self._swept
            for table in tables:
                now = (table.schema.version, table.state)
                if self._swept.get(table.table_id) != now and table.state is TableState.RUNNING:
                    note_table_schemas(self.catalog, table)
                seen[table.table_id] = now
            if changed is None:
                self._swept_generation, self._swept = generation, seen

    def alter_stale(self) -> int:
        """Bring up to `catch_ups_per_round_max` replicas noted at an older schema version to
        their table's (`catch_up`), each re-checked against the catalog first; returns the
        number altered. A replica on a server not LIVE stays noted until it is back; one
        noted less than STALE_GRACE_S ago waits (its report may only lag its alter)."""
        with self.catalog.lock:
            noted = sorted(self.catalog.stale_schemas.items())
        now = time.monotonic()
        before, self._stale_since = self._stale_since, {}
        for key, version in noted:  # (version, since when), kept for the replicas still noted
            kept = before.get(key)
            self._stale_since[key] = kept if kept and kept[0] == version else (version, now)
        tried = altered = 0
        for key, version in noted:
            if tried >= self.config.catch_ups_per_round_max or self._stop.is_set():
                break
            if now - self._stale_since[key][1] < STALE_GRACE_S:
                continue
            server_uuid, tablet_id = key
            with self.catalog.lock:
                if self.catalog.stale_schemas.get(key) != version:
                    continue  # reported again meanwhile
                tablet = self.catalog.tablets.get(tablet_id)
                table = self.catalog.tables.get(tablet.table_id) if tablet is not None else None
                server = self.catalog.servers.get(server_uuid)
                if (
                    table is None
                    or server is None
                    or table.state is not TableState.RUNNING
                    or version >= table.schema.version
                ):
                    del self.catalog.stale_schemas[key]
                    continue
            if server.state is not ServerState.LIVE:
                continue
            if not self.serving():  # a leader woken past its lease must not alter
                break
            tried += 1
            outcome = self._catch_up(server, tablet_id, table)
            altered += outcome == "altered"
            if outcome != "failed":
                with self.catalog.lock:
                    if self.catalog.stale_schemas.get(key) == version:
                        del self.catalog.stale_schemas[key]
        return altered

    def _catch_up(self, server: ServerInfo, tablet_id: str, table: TableInfo) -> str:
        """One replica brought to its table's schema: "altered"; "current" (at the table's
        version already: its report lagged); "failed" (left noted: tried next round)."""
        target = table.schema
        try:
            sent = catch_up(
                self._client(server.address),
                server.uuid,
                tablet_id,
                target,
                self.config.call_timeout_s,
            )
        except CasFailed as e:  # altered meanwhile: its next report says where it is
            logger.info("tablet %s: schema catch-up on %s: %s", tablet_id, server.uuid, e)
            return "failed"
        except RpcError as e:
            # UNAVAILABLE, TIMED_OUT, TABLET_NOT_FOUND, BAD_REQUEST ...: tried again next
            # round while it stays noted; logged at INFO once a minute.
            key = (tablet_id, "SCHEMA", server.uuid, type(e).__name__)
            logger.log(self._level_of(key), "tablet %s: schema catch-up on %s failed: %s "
                       "(repeats logged once a minute)", tablet_id, server.uuid, e)  # fmt: skip
            return "failed"
        if sent is None:
            logger.debug("tablet %s: the replica on %s is at schema version %d already",
                         tablet_id, server.uuid, target.version)  # fmt: skip
            return "current"
        logger.info(
            "tablet %s (table %s): the replica on %s brought from schema version %d to %d "
            "(added %s, dropped %s)",
            tablet_id,
            table.name,
            server.uuid,
            sent.expected_version,
            sent.new_version,
            [c.name for c in sent.add_columns],
            list(sent.drop_columns),
        )
        self.counters.schemas_caught_up += 1
        return "altered"

    def _leader_view(
        self, view: TabletView, fetched: dict[str, dict[str, ts.TabletReportPB] | None]
    ) -> TabletView | None:
        """The tablet's committed config with member types, from its leader itself."""
        leader = view.leader_uuid
        if leader not in fetched:
            if len(fetched) >= self.config.fetches_per_round_max:
                return None
            fetched[leader] = None
            address = self._address(leader)
            if address:
                try:
                    answer = self._client(address).call(
                        leader,
                        "TServer.ListTablets",
                        ts.ListTabletsRequest(),
                        ts.ListTabletsResponse,
                        timeout_s=self.config.call_timeout_s,
                        idempotent=True,
                    )
                    fetched[leader] = {r.tablet_id: r for r in answer.tablets}
                    self._learn_member_types(leader, answer.tablets)
                except RpcError as e:
                    logger.debug("ListTablets on %s failed: %s", leader, e)
        reports = fetched.get(leader)
        r = reports.get(view.tablet_id) if reports else None
        if r is None or r.role != "LEADER":
            return None
        cfg = r.committed_config
        return TabletView(
            view.tablet_id,
            view.replication_factor,
            leader,
            max(0, cfg.opid_index),
            tuple(Member(p.uuid, p.member_type != ts.MemberType.NON_VOTER) for p in cfg.peers),
        )

    def _learn_member_types(self, leader: str, reports) -> None:
        """Member types of the configs this leader has committed, kept with the heartbeat
        report of the same config (heartbeats do not carry them yet)."""
        with self.catalog.lock:
            for r in reports:
                old = self.catalog.tablet_reports.get(r.tablet_id)
                cfg = r.committed_config
                if r.role != "LEADER" or old is None:
                    continue
                uuids = tuple(p.uuid for p in cfg.peers)
                if (old.config_index, old.config_uuids) != (max(0, cfg.opid_index), uuids):
                    continue
                self.catalog.tablet_reports[r.tablet_id] = dataclasses.replace(
                    old, member_types=tuple(_type_name(p.member_type) for p in cfg.peers)
                )

    def _execute(self, action: Action) -> bool:
        leader_address = self._address(action.leader_uuid)
        request = ts.ChangeConfigRequest(
            tablet_id=action.tablet_id, cas_config_index=action.cas_config_index
        )
        request.peer.uuid = action.peer_uuid
        if action.kind == ADD:
            request.type = ts.ConfigChangeTypePB.ADD_SERVER
            request.peer.address = self._address(action.peer_uuid)
            request.peer.member_type = ts.MemberType.NON_VOTER
            request.peer.promote = True
            if not request.peer.address:
                return False
        else:
            request.type = ts.ConfigChangeTypePB.REMOVE_SERVER
        if not leader_address:
            return False
        logger.log(
            self._level(action, "sent"),
            "tablet %s: %s %s via leader %s (cas %d): %s",
            action.tablet_id,
            action.kind,
            action.peer_uuid,
            action.leader_uuid,
            action.cas_config_index,
            action.reason,
        )
        try:
            answer = self._client(leader_address).call(
                action.leader_uuid,
                "TServer.ChangeConfig",
                request,
                ts.ChangeConfigResponse,
                timeout_s=self.config.call_timeout_s,
                idempotent=True,  # the CAS makes a repeat harmless
            )
        except RpcError as e:
            # CAS_FAILED / ALREADY_IN_PROGRESS / ILLEGAL_STATE / NOT_LEADER / UNAVAILABLE /
            # TIMED_OUT are normal here: the next round decides again from a fresh report.
            self.counters.refused += 1
            self.recent_actions.append((time.time(), action, f"refused: {type(e).__name__}"))
            self.counters.last_error[action.tablet_id] = f"{type(e).__name__}: {e.message}"
            logger.log(self._level(action, type(e).__name__),
                       "tablet %s: %s %s refused: %s (repeats logged once a minute)",
                       action.tablet_id, action.kind, action.peer_uuid, e)  # fmt: skip
            return False
        self.counters.sent += 1
        self.recent_actions.append((time.time(), action, "sent"))
        self._record_config(action, answer.committed_config)
        return True

    def _level(self, action: Action, outcome: str) -> int:
        """INFO the first time in REPEAT_LOG_S for this change and outcome, else DEBUG."""
        return self._level_of((action.tablet_id, action.kind, action.peer_uuid, outcome))

    def _level_of(self, key: tuple[str, str, str, str]) -> int:
        now = time.monotonic()
        last = self._logged.get(key)
        if last is not None and now - last < REPEAT_LOG_S:
            return logging.DEBUG
        if len(self._logged) >= LOGGED_MAX:
            self._logged.clear()
        self._logged[key] = now
        return logging.INFO

    def _record_config(self, action: Action, config: ts.RaftConfigPB) -> None:
        """The leader's answer is the newest committed config: use it until the next report."""
        if config.opid_index < 0 or not config.peers:
            return
        with self.catalog.lock:
            old = self.catalog.tablet_reports.get(action.tablet_id)
            if old is None or old.config_index > config.opid_index:
                return
            self.catalog.tablet_reports[action.tablet_id] = TabletReportInfo(
                leader_uuid=action.leader_uuid,
                term=old.term,
                config_index=config.opid_index,
                config_uuids=tuple(p.uuid for p in config.peers),
                reported_at=time.monotonic(),
                reporter_uuid=action.leader_uuid,
                role="LEADER",
                member_types=tuple(_type_name(p.member_type) for p in config.peers),
            )

    # ------------------------------------------------------------ rpc

    def _address(self, uuid: str) -> str:
        with self.catalog.lock:
            server = self.catalog.servers.get(uuid)
            return server.address if server is not None else ""

    def _client(self, address: str) -> RpcClient:
        client = self._clients.get(address)
        if client is None:
            if len(self._clients) >= CLIENTS_MAX:
                self._clients.pop(next(iter(self._clients)))
            client = RpcClient(
                address,
                self.caller_uuid,
                transport=self._transport,
                privileged_key=self._privileged_key,
            )
            self._clients[address] = client
        return client
