"""The coordinator's request handling, independent of the transport.

The leader handles a mutating request as architecture 4.3 says: validate; lock; decide;
conditional append of the record (the commit point, through the lease driver's safe append);
apply; unlock; complete (tablet-server calls, then DONE); answer. Exactly-once: a request id
already in the catalog's sessions waits for that operation's result instead of running again.

A node serves only when its lease is valid AND recovery for the current epoch has finished
(replayed to the takeover record, every pending operation completed in log order); before,
requests get NOT_LEADER with the hint or UNAVAILABLE. Catalog reads come from the leader's
memory under its lease. Heartbeats are recorded on every node; only the leader acts (marks
silent servers down, asks unknown servers to enlist).

Threads: one recovery thread per epoch won, one monitor thread (silent servers, pending
operations left by failed completions). Both stop in close().
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator import replication
from coordinator.catalog import Catalog, OpResult, ServerState, TabletReportInfo
from coordinator.crashpoints import CrashPoints
from coordinator.leases.driver import LeaseDriver
from coordinator.leases.lease import Role
from coordinator.ops import OPS, TWO_PHASE
from coordinator.ops.common import CompletionContext, TabletServerGateway, check_name
from coordinator.ops.server_down import ServerDownRequest
from coordinator.replay.replayer import Replayer
from rpc.errors import IllegalState, NotFound, NotLeader, RpcError, Unavailable
from rpc.observe import LatencyHistogram
from rpc.protocols import coordinator_pb2 as pb

logger = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 10.0
REPORTS_PER_HOLD = 500  # replica reports taken in one hold of the catalog lock (`heartbeat`)
# The steps of a mutating operation the engine times (`Engine.step_latency`, exported as
# logcentric_coordinator_operation_step_seconds): where a slow CreateTable spent its time.
#   write_lock    waiting for the engine's write lock before the commit point
#   lease_lock    waiting for the lease driver's append lock (its renewals and polls hold it)
#   commit_point  deciding and the conditional append of the first record, lease lock held
#   apply         applying that record to the catalog
#   complete      a two-phase operation's completion: tablet-server calls, then `done`
#   calls         of `complete`, CreateTable's replica calls, all of them (in parallel)
#   replica_call  of `calls`, each call as the leader saw it (its retries included)
#   done          of `complete`, the DONE record: write lock, conditional append, apply
STEPS = (
    "write_lock", "lease_lock", "commit_point", "apply", "complete", "calls", "replica_call",
    "done",
)  # fmt: skip
RECOVERY_BACKOFF_S = 0.1


@dataclass(frozen=True, slots=True)
class EngineConfig:
    tserver_timeout_s: float = 5.0
    result_wait_s: float = 10.0
    call_timeout_s: float = 5.0
    monitor_interval_s: float = 0.25
    replay_timeout_s: float = 10.0


class _NothingToLog(Exception):
    """decide found the request already satisfied (e.g. enlisting a live server again, or
    setting the replication factor a table has), or, with `duplicate`, a concurrent
    duplicate of a keyed request committed it first (its result is in the sessions)."""

    def __init__(self, *, duplicate: bool = False) -> None:
        super().__init__()
        self.duplicate = duplicate


class Engine:
    def __init__(
        self,
        catalog: Catalog,
        lease: LeaseDriver,
        replayer: Replayer,
        gateway: TabletServerGateway,
        crash: CrashPoints | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        self.catalog = catalog
        self.lease = lease
        self.replayer = replayer
        self.gateway = gateway
        self.crash = crash or CrashPoints()
        self.config = config or EngineConfig()
        self.recovered_epoch = 0
        self.leader_since = 0.0
        self._write_lock = threading.Lock()
        self._completing: set[int] = set()
        self._stalled: set[int] = set()  # completions that failed, for the monitor to retry
        self._completing_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads_lock = threading.Lock()
        self._recoveries: list[threading.Thread] = []
        self._monitor: threading.Thread | None = None
        # (operation kind, step) -> latency; written by request threads without a lock (a
        # lost increment now and then is fine for a metric), read at scrape time.
        self.step_latency: dict[tuple[str, str], LatencyHistogram] = {}

    def _timed(self, kind: str, step: str, seconds: float) -> None:
        h = self.step_latency.get((kind, step))
        if h is None:
            h = self.step_latency.setdefault((kind, step), LatencyHistogram())
        h.observe(seconds)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self._monitor = threading.Thread(target=self._monitor_loop, name="monitor", daemon=True)
        self._monitor.start()

    def close(self) -> None:
        self._stop.set()
        with self._threads_lock:
            threads = [t for t in (self._monitor, *self._recoveries) if t is not None]
        for t in threads:
            t.join(JOIN_TIMEOUT_S)
            if t.is_alive():
                logger.error("thread %s did not stop in %.0f s", t.name, JOIN_TIMEOUT_S)

    def on_role_change(self, role: Role, epoch: int) -> None:
        """Lease driver callback: a new epoch won starts recovery in its own thread."""
        if role is not Role.LEADER or self._stop.is_set():
            return
        self.leader_since = time.monotonic()
        thread = threading.Thread(
            target=self._recover, args=(epoch,), name=f"recovery-{epoch}", daemon=True
        )
        # Never join here: this runs on the lease thread, which must keep renewing. A
        # recovery of an older epoch ends by itself (its epoch is no longer current).
        with self._threads_lock:
            self._recoveries = [t for t in self._recoveries if t.is_alive()]
            self._recoveries.append(thread)
        thread.start()

    # ------------------------------------------------------------ role

    def hint(self):
        return self.lease.hint()

    def serving(self) -> bool:
        return self.lease.is_serving() and self.recovered_epoch == self.lease.epoch

    def check_serving(self) -> None:
        if not self.lease.is_serving():
            raise NotLeader("this coordinator node is not the leader", leader_hint=self.hint())
        if self.recovered_epoch != self.lease.epoch:
            raise Unavailable(
                "the new leader is replaying the log", retry_after_ms=100, leader_hint=self.hint()
            )

    # ------------------------------------------------------------ mutating requests

    def execute(self, kind: str, request, *, internal: bool = False):
        """Run one operation; returns its response message. `internal` requests (the
        leader's own ServerDown) may run during recovery."""
        if internal:
            if not self.lease.is_serving():
                raise NotLeader("not the leader", leader_hint=self.hint())
        else:
            self.check_serving()
        module = OPS[kind]
        rid: pb.RequestId | None = getattr(request, "request_id", None)
        keyed = rid is not None and bool(rid.client_id) and rid.seq > 0
        if keyed:
            with self.catalog.lock:
                known = self.catalog.session_result(rid.client_id, rid.seq)
            if known is not None:
                return self._await(module, rid)
        box: list[pb.LogRecord] = []
        marks: list[float] = []

        def build(expected_id: int) -> tuple[bytes, Sequence[int]]:
            marks.append(time.monotonic())  # the lease driver's lock is held from here
            with self.catalog.lock:
                if keyed and self.catalog.session_result(rid.client_id, rid.seq) is not None:
                    raise _NothingToLog(duplicate=True)
                record = module.decide(self.catalog, request, expected_id)
            if record is None:
                raise _NothingToLog()
            box.append(record)
            return record.SerializeToString(), module.invalidates_at_commit(record)

        waited = time.monotonic()
        with self._write_lock:
            locked = time.monotonic()
            self._timed(kind, "write_lock", locked - waited)
            self.crash.hit(f"{kind}.before_commit_point")
            try:
                entry_id = self.lease.safe_append(build)
            except _NothingToLog as e:
                if e.duplicate:
                    return self._await(module, rid)
                return module.response(None)  # nothing logged: no result to wait for
            appended = time.monotonic()
            self._timed(kind, "lease_lock", marks[0] - locked)
            self._timed(kind, "commit_point", appended - marks[0])
            record = box[0]
            self.replayer.apply_own(entry_id, record)
            self._timed(kind, "apply", time.monotonic() - appended)
            self.crash.hit(f"{kind}.after_commit_point")
        if kind in TWO_PHASE:
            started = time.monotonic()
            self.complete_pending(entry_id)
            self._timed(kind, "complete", time.monotonic() - started)
        if keyed:
            return self._await(module, rid)
        return module.response(None)

    def _await(self, module, rid: pb.RequestId):
        """The result of a logged request: completes it here if nobody else is doing so."""
        deadline = time.monotonic() + self.config.result_wait_s
        while True:
            with self.catalog.lock:
                result: OpResult | None = self.catalog.session_result(rid.client_id, rid.seq)
            if result is None:  # evicted: more than 64 newer requests of this client
                raise IllegalState(
                    f"the result of request {rid.client_id}/{rid.seq} is no longer kept"
                )
            if result.done:
                return module.response(result)
            if not self.lease.is_serving():
                raise NotLeader(
                    "lost the lease before the operation finished", leader_hint=self.hint()
                )
            if not self.complete_pending(result.op_id):
                with self.catalog.lock:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise Unavailable(
                            f"operation {result.op_id} still in progress", retry_after_ms=200
                        )
                    self.catalog.changed.wait(min(remaining, 0.1))

    def complete_pending(self, op_id: int) -> bool:
        """Complete a pending operation unless another thread is; True if it ran here."""
        with self._completing_lock:
            if op_id in self._completing:
                return False
            self._completing.add(op_id)
        try:
            with self.catalog.lock:
                pending = self.catalog.pending.get(op_id)
            if pending is None:
                return True
            try:
                OPS[pending.kind].complete(self._context(pending.kind), pending.record)
            except RpcError:
                # Left pending: the monitor rolls it forward later (e.g. once a silent
                # tablet server is marked down and skipped).
                with self._completing_lock:
                    self._stalled.add(op_id)
                raise
            with self._completing_lock:
                self._stalled.discard(op_id)
            return True
        finally:
            with self._completing_lock:
                self._completing.discard(op_id)

    def _context(self, kind: str) -> CompletionContext:
        def commit(record: pb.LogRecord, invalidates: Sequence[int]) -> int:
            started = time.monotonic()
            entry_id = self._commit(record, invalidates)
            self._timed(kind, "done", time.monotonic() - started)
            return entry_id

        return CompletionContext(
            catalog=self.catalog,
            gateway=self.gateway,
            commit=commit,
            crash=self.crash.hit,
            call_timeout_s=self.config.call_timeout_s,
            timed=lambda step, seconds: self._timed(kind, step, seconds),
        )

    def _commit(self, record: pb.LogRecord, invalidates: Sequence[int]) -> int:
        data = record.SerializeToString()
        with self._write_lock:
            entry_id = self.lease.safe_append(lambda _expected: (data, tuple(invalidates)))
            self.replayer.apply_own(entry_id, record)
        return entry_id

    # ------------------------------------------------------------ recovery

    def _recover(self, epoch: int) -> None:
        """Replay to the takeover record, complete every pending operation in log order,
        then serve (seed 003: never serve a request before older operations are done)."""
        logger.info("epoch %d: recovering", epoch)
        while not self._stop.is_set() and self.lease.epoch == epoch and self.lease.is_serving():
            try:
                self.replayer.apply_through(epoch, timeout_s=self.config.replay_timeout_s)
                self.replayer.verify()
                with self.catalog.lock:
                    pending = sorted(self.catalog.pending)
                for op_id in pending:
                    self.complete_pending(op_id)
                with self.catalog.lock:
                    if self.catalog.pending:
                        self.catalog.changed.wait(RECOVERY_BACKOFF_S)
                        continue
                    self.recovered_epoch = epoch
                    self.catalog.changed.notify_all()
                logger.info("epoch %d: recovered, serving", epoch)
                return
            except RpcError as e:
                logger.warning("epoch %d: recovery step failed: %s", epoch, e)
                self._stop.wait(RECOVERY_BACKOFF_S)
        logger.info("epoch %d: recovery abandoned (lease lost or closing)", epoch)

    # ------------------------------------------------------------ leader duties

    def _monitor_loop(self) -> None:
        while not self._stop.wait(self.config.monitor_interval_s):
            if not self.lease.is_serving():
                continue
            if self.catalog.applied_id < self.lease.epoch:
                continue  # decisions need the catalog replayed to the takeover record
            try:
                self._mark_silent_servers_down()
                if self.serving():
                    with self._completing_lock:
                        stalled = sorted(self._stalled)
                    for op_id in stalled:
                        self.complete_pending(op_id)
            except RpcError as e:
                logger.warning("monitor: %s", e)

    def _mark_silent_servers_down(self) -> None:
        now = time.monotonic()
        with self.catalog.lock:
            silent = [
                s.uuid
                for s in self.catalog.live_servers()
                if now - max(self.catalog.heartbeats.get(s.uuid, 0.0), self.leader_since)
                > self.config.tserver_timeout_s
            ]
        for uuid in silent:
            logger.warning(
                "tablet server %s silent for %.1f s: marking it down",
                uuid,
                self.config.tserver_timeout_s,
            )
            self.execute(
                "server_down",
                ServerDownRequest(uuid, f"no heartbeat for {self.config.tserver_timeout_s} s"),
                internal=True,
            )

    # ------------------------------------------------------------ heartbeats

    def heartbeat(self, request: pb.HeartbeatRequest) -> pb.HeartbeatResponse:
        """A tablet server's beat and its replicas' reports. The reports are taken
        REPORTS_PER_HOLD at a time, each slice in one hold of the catalog lock: a full report
        of 10,000 replicas took 70-120 ms of the lock in one hold, and after a failover every
        server sends one to the new leader, whose first operations waited behind them. A
        change of role between slices stops there, and a full report is then not counted
        as taken (the server is asked for another)."""
        now = time.monotonic()
        leader = self.serving()
        uuid = request.server_uuid
        reports = request.tablets
        whole = True
        with self.catalog.lock:
            self.catalog.heartbeats[uuid] = now
            if request.http_address:
                self.catalog.http_addresses[uuid] = request.http_address[:256]
            if request.HasField("disk"):
                self.catalog.disks[uuid] = request.disk
            self._forget_gone(request)
        for start in range(0, len(reports), REPORTS_PER_HOLD):
            if start and self.serving() != leader:
                whole = False
                break
            with self.catalog.lock:
                for report in reports[start : start + REPORTS_PER_HOLD]:
                    self._take_replica_report(uuid, report, now, leader)
        with self.catalog.lock:
            if not whole or self.serving() != leader:
                self.catalog.full_reports.discard(uuid)  # reports left out: all again
            elif not request.incremental:
                self.catalog.full_reports.add(uuid)
            needs_full = uuid not in self.catalog.full_reports
            server = self.catalog.servers.get(uuid)
        needs_enlist = leader and (
            server is None
            or server.state is not ServerState.LIVE
            or server.address != request.address
        )
        return pb.HeartbeatResponse(
            is_leader=leader, needs_enlist=needs_enlist, needs_full_report=needs_full
        )

    def _take_replica_report(
        self, server_uuid: str, report: pb.TabletReport, now: float, leader: bool
    ) -> None:
        """One replica's report (caller holds the lock). Kept per replica: reports are
        incremental, so a replica whose own report does not change is judged again (stray
        or not, `replication.note_report`) whenever its tablet's leader reports, e.g. a
        replica FAILED on a live server once the leader's config leaves it out."""
        replicas = self.catalog.replica_reports.setdefault(report.tablet_id, {})
        replicas[server_uuid] = report
        if report.tablet_id in self.catalog.tablets:
            self._take_report(server_uuid, report, now)
        if not leader:  # replicas to delete: only a serving leader's catalog is complete
            return
        replication.note_report(self.catalog, server_uuid, report)
        if report.role == "LEADER" and report.leader_uuid == server_uuid:
            for other, r in replicas.items():
                if other != server_uuid:
                    replication.note_report(self.catalog, other, r)

    def _forget_gone(self, request: pb.HeartbeatRequest) -> None:
        """What the server's replicas it no longer reports left noted (caller holds the
        lock): those its incremental report names gone, and with a full report every one
        it leaves out (their reports; stray, FAILED or stale-schema replicas not there any
        more)."""
        uuid = request.server_uuid
        gone = set(request.vanished_tablet_ids)
        if not request.incremental:
            hosted = {r.tablet_id for r in request.tablets}
            gone |= {
                t
                for t, by in self.catalog.replica_reports.items()
                if uuid in by and t not in hosted
            }
            gone |= {t for (u, t) in self.catalog.strays if u == uuid and t not in hosted}
            gone |= {t for (u, t) in self.catalog.stale_schemas if u == uuid and t not in hosted}
            gone |= {
                t
                for t, us in self.catalog.failed_replicas.items()
                if uuid in us and t not in hosted
            }
        for t in gone:
            by = self.catalog.replica_reports.get(t)
            if by is not None:
                by.pop(uuid, None)
                if not by:
                    del self.catalog.replica_reports[t]
            self.catalog.strays.pop((uuid, t), None)
            self.catalog.stale_schemas.pop((uuid, t), None)
            failed = self.catalog.failed_replicas.get(t)
            if failed is not None:
                failed.discard(uuid)
                if not failed:
                    del self.catalog.failed_replicas[t]

    def _take_report(self, server_uuid: str, report: pb.TabletReport, now: float) -> None:
        """Keep, per tablet, what its leader last reported (caller holds the lock). A
        leader's report replaces one of an older term, or of the same term with an older or
        equal config index; a follower's report is kept only while no leader has reported
        in that term or later (it gives the locations before the first election)."""
        info = TabletReportInfo(
            report.leader_uuid,
            report.term,
            report.config_index,
            tuple(report.config_uuids),
            now,
            reporter_uuid=server_uuid,
            role=report.role,
            member_types=tuple(report.config_member_types)
            if len(report.config_member_types) == len(report.config_uuids)
            else (),
        )
        old = self.catalog.tablet_reports.get(report.tablet_id)
        if (
            not info.member_types
            and old is not None
            and old.member_types
            and (old.config_index, old.config_uuids) == (info.config_index, info.config_uuids)
        ):
            # Member types learnt from the tablet's leader (coordinator/replication.py) stay
            # valid while the committed config is the same.
            info = dataclasses.replace(info, member_types=old.member_types)
        if info.from_leader:
            if (
                old is None
                or not old.from_leader
                or (info.term, info.config_index) >= (old.term, old.config_index)
            ):
                self.catalog.tablet_reports[report.tablet_id] = info
        elif old is None or (not old.from_leader and info.term >= old.term):
            if info.config_uuids:
                self.catalog.tablet_reports[report.tablet_id] = info
        elif old.from_leader and old.reporter_uuid == server_uuid and info.term > old.term:
            # The old leader stepped down: its report no longer says who leads.
            self.catalog.tablet_reports[report.tablet_id] = info

    # ------------------------------------------------------------ reads (leader only)

    def list_tables(self) -> pb.ListTablesResponse:
        self.check_serving()
        with self.catalog.lock:
            tables = sorted(self.catalog.tables.values(), key=lambda t: t.name)
            summaries = [
                pb.TableSummary(table_id=t.table_id, name=t.name, state=t.state.value)
                for t in tables
            ]
        return pb.ListTablesResponse(tables=summaries)

    def describe_table(self, request: pb.DescribeTableRequest) -> pb.DescribeTableResponse:
        self.check_serving()
        check_name(request.name)
        with self.catalog.lock:
            table = self.catalog.table_by_name(request.name)
            if table is None:
                raise NotFound(f"no table named {request.name!r}")
            return pb.DescribeTableResponse(
                table_id=table.table_id,
                name=table.name,
                schema=table.schema,
                num_tablets=len(table.tablet_ids),
                replication_factor=table.replication_factor,
                state=table.state.value,
            )

    def get_tablet_locations(
        self, request: pb.GetTabletLocationsRequest
    ) -> pb.GetTabletLocationsResponse:
        self.check_serving()
        with self.catalog.lock:
            if request.table_id:
                table = self.catalog.tables.get(request.table_id)
            else:
                check_name(request.name)
                table = self.catalog.table_by_name(request.name)
            if table is None:
                raise NotFound(f"no table {request.table_id or request.name!r}")
            response = pb.GetTabletLocationsResponse(
                table_id=table.table_id, schema_version=table.schema.version
            )
            for tablet_id in table.tablet_ids:
                tablet = self.catalog.tablets[tablet_id]
                report = self.catalog.tablet_reports.get(tablet_id)
                reported_leader = report.leader_uuid if report else ""
                loc = response.tablets.add(
                    tablet_id=tablet_id,
                    config_index=report.config_index if report else -1,
                    replication_factor=table.replication_factor,
                )
                loc.partition.hash_bucket = tablet.hash_bucket
                loc.partition.num_buckets = tablet.num_buckets
                types = report.member_types if report else ()
                for i, uuid in enumerate(self.catalog.current_replicas(tablet_id)):
                    server = self.catalog.servers.get(uuid)
                    loc.replicas.add(
                        server_uuid=uuid,
                        address=server.address if server else "",
                        is_leader=(uuid == reported_leader) if reported_leader else i == 0,
                        server_state=server.state.value if server else "REMOVED",
                        member_type=types[i] if i < len(types) else "VOTER",
                    )
            return response

    def list_servers(self) -> pb.ListServersResponse:
        self.check_serving()
        now = time.monotonic()
        with self.catalog.lock:
            counts = self.catalog.replica_counts()
            retired = self.catalog.retired_servers()
            response = pb.ListServersResponse()
            for uuid in sorted(self.catalog.servers):
                s = self.catalog.servers[uuid]
                seen = self.catalog.heartbeats.get(uuid)
                response.servers.add(
                    uuid=uuid,
                    address=s.address,
                    state=s.state.value,
                    replicas=counts.get(uuid, 0),
                    last_heartbeat_age_s=(now - seen) if seen is not None else -1.0,
                    retired=uuid in retired,
                )
                disk = self.catalog.disks.get(uuid)
                if disk is not None:
                    row = response.servers[-1]
                    row.fs_total_bytes = disk.total_bytes
                    row.fs_free_bytes = disk.free_bytes
                    row.fs_used_bytes = disk.used_bytes
                    row.fs_reserved_bytes = disk.reserved_bytes
                    row.fs_full = disk.full
                    row.fs_root_bytes = disk.root_bytes
            return response

    # ------------------------------------------------------------ any node

    def get_leader(self) -> pb.GetLeaderResponse:
        hint = self.hint()
        return pb.GetLeaderResponse(
            leader_uuid=hint.uuid,
            leader_address=hint.address,
            epoch=hint.epoch,
            serving=self.serving(),
        )

    def status(self, uuid: str, address: str) -> pb.StatusResponse:
        hint = self.hint()
        if self.serving():
            role = "LEADER"
        elif self.lease.is_serving():
            role = "RECOVERING"
        else:
            role = "FOLLOWER"
        with self.catalog.lock:
            return pb.StatusResponse(
                uuid=uuid,
                address=address,
                role=role,
                applied_id=self.catalog.applied_id,
                # The current epoch as this node knows it (its own when it leads).
                epoch=self.lease.epoch if role != "FOLLOWER" else hint.epoch,
                leader_uuid=hint.uuid,
                leader_address=hint.address,
                tables=len(self.catalog.tables),
                tablets=len(self.catalog.tablets),
                servers=len(self.catalog.servers),
                pending_ops=len(self.catalog.pending),
            )
