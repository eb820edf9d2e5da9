"""Heartbeats from a tablet server to every coordinator node (architecture 4.5).

Every `interval_s` the heartbeater sends each coordinator node a HeartbeatRequest with this
server's UUID, address and tablet reports. Every node receives them (so a node that becomes
leader already knows who is alive); only the leader acts. When the leader answers
`needs_enlist` (it does not know this server, or marked it down), the heartbeater sends it
EnlistServer.

Tablet reports are incremental (issue 28: a report of every replica every beat cost most of
an idle server's CPU at 1,000 replicas). Each node gets a full report (every replica) first,
and again whenever it answers `needs_full_report`; then only the replicas whose report
differs from the one that node last took, and the ids of those gone since. Which to look at:
those the Raft driver says may have changed (`changes`: role, term, leader, committed
config, a replica added, removed or failed), again for `RECHECK_BEATS` beats after (a
replica's state may settle just after the driver's event), those a node has not taken yet
(its call failed), and every replica once every `SCAN_INTERVAL_S`. What changes without the
driver is named to it by the tablet manager (`RaftDriver.report_changed`: a copy that began,
failed or finished, its COPY_FAILED status expiring, a replica opened, created or deleted, a
tablet failed by its apply), so that scan is only a backstop (every 5 min, not every 30 s:
an O(replicas) pass, about 30 us a replica); what it alone sends
is a replica's last op index moving with writes (the coordinator keeps it for display
only; a schema change is named by the manager: the coordinator acts on the version). An
idle server builds no report.

With CURVE (`curve`, `coordinator_keys`) the heartbeats go as a CURVE client with the server's
key pair, to coordinator nodes that must prove they hold the key given for their address;
a leader's answer may carry the principals table (design/security.md section 4), handed to
`principals` (tservers/principals.py) with every leader's answer.

With a join token (`join_keypair`, design/security.md section 5): while no coordinator node
answers a heartbeat and some refuse this server's key at the handshake (not admitted), each
round also calls Coordinator.JoinServer with the token's key pair, naming this server's UUID
and public key, until a leader admits it; then the token is dropped. The request id is fixed
per server, so a retry after a lost answer or a failover gets the first answer. The token's
text and secret are never logged.

This module speaks the coordinator's protocol (its generated messages and method names),
never its code: the import runs from tservers to a generated protocol module only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence

from rpc import errors, handshakes
from rpc.client import RpcClient, Transport
from rpc.keys import ClientCurve, KeyPair
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols.tserver_pb2 import DataState, MemberType, TabletReportPB

HEARTBEAT_INTERVAL_S_DEFAULT = 0.5
CALL_TIMEOUT_S = 1.0
# Incremental reports: a replica the driver named is looked at again this many beats, and
# every replica is looked at (and what changed sent) this often (a backstop: every change the
# coordinator acts on is named by the driver or the tablet manager). Two beats (1 s) see a
# state that settles just after the driver's event; each beat more rebuilds every report a
# restart changed: at a kill -9 restart of 10,000 replicas with 6, building reports was a
# fifth of the restarted server's samples (issue 28, session 21).
RECHECK_BEATS = 2
SCAN_INTERVAL_S = 300.0

log = logging.getLogger(__name__)


def to_coordinator_report(report: TabletReportPB, server_uuid: str) -> cpb.TabletReport:
    """A tablet report as the coordinator reads it."""
    config = report.committed_config
    running = report.status == "RUNNING"
    # Role and leader come from the replica's Raft core (per-tablet consensus).
    role = report.role if running and report.role else report.status
    return cpb.TabletReport(
        tablet_id=report.tablet_id,
        data_state=DataState.Name(report.data_state) if report.data_state else "",
        role=role,
        term=report.current_term,
        config_index=max(0, config.opid_index),
        config_uuids=[p.uuid for p in config.peers],
        config_member_types=[MemberType.Name(p.member_type) for p in config.peers],
        leader_uuid=report.leader_uuid if running else "",
        last_op_index=report.last_op_id.index,
        schema_version=report.schema_version,
    )


class _NodeReports:
    """What one coordinator node took of this server's tablet reports: tablet id -> the
    serialized report (heartbeater thread only)."""

    __slots__ = ("taken", "full_due", "pending", "answered")

    def __init__(self) -> None:
        self.taken: dict[str, bytes] = {}
        self.full_due = True  # a full report next (first contact, or the node asked)
        self.pending: set[str] = set()  # sent but not taken (the call failed): again
        # Its last call was answered. A full report is built only for a node that answers:
        # one that does not gets heartbeats without reports until it does, and then asks
        # for a full report (a dead coordinator node must not cost a full report a beat).
        self.answered = True


class Heartbeater:
    """A named thread; stop it with close(). A context manager."""

    def __init__(
        self,
        server_uuid: str,
        address: Callable[[], str],
        reports: Callable[[Collection[str] | None], Sequence[TabletReportPB]],
        coordinators: Sequence[str],
        *,
        changes: Callable[[], set[str]] | None = None,
        interval_s: float = HEARTBEAT_INTERVAL_S_DEFAULT,
        http_address: Callable[[], str] = lambda: "",
        disk: Callable[[], cpb.DiskReport | None] = lambda: None,
        curve: ClientCurve | None = None,
        coordinator_keys: Sequence[str] = (),
        principals=None,
        join_keypair: KeyPair | None = None,
    ) -> None:
        """`curve`: heartbeat as a CURVE client; `coordinator_keys[i]` is the public key of
        the node at `coordinators[i]`. `principals` (tservers.principals.PrincipalCache):
        told of every leader's answer, with the table when one carries it. `join_keypair`:
        a join token's key pair (with `curve`), used while this server's key is refused.
        `reports(ids)`: the reports of those replicas (all: None); `changes()`: the ids
        whose report may have changed since the last call (None: every replica is looked
        at every beat, and only what changed is sent)."""
        assert join_keypair is None or curve is not None, "a join token needs CURVE"
        assert coordinators, "no coordinator to heartbeat to"
        assert curve is None or len(coordinator_keys) == len(coordinators), (
            "one public key per coordinator address"
        )
        self._principals = principals
        self._http_address = http_address
        self._disk = disk
        self.server_uuid = server_uuid
        self._address = address
        self._reports = reports
        self._changes = changes
        self.coordinators = list(coordinators)
        self._nodes = {a: _NodeReports() for a in self.coordinators}
        self._recheck: dict[str, int] = {}  # tablet id -> beats it is still looked at
        self._scanned_s = time.monotonic()
        self._built_msgs: dict[str, cpb.TabletReport] = {}  # this beat's, by tablet id
        self.reports_built = 0  # tablet reports built (tests, metrics)
        self.scans = 0  # beats that built every replica's report (tests, metrics)
        self.interval_s = interval_s
        self._transport = Transport(name="heartbeat", curve=curve)
        keys = dict(zip(self.coordinators, coordinator_keys, strict=True)) if curve else {}
        self._clients = {
            a: RpcClient(a, server_uuid, transport=self._transport, server_key=keys.get(a, ""))
            for a in self.coordinators
        }
        self._uuids: dict[str, str] = {}
        self._public_key = curve.keypair.public if curve is not None else ""
        self._join_transport: Transport | None = None
        self._join_clients: dict[str, RpcClient] = {}
        self._join_uuids: dict[str, str] = {}
        if join_keypair is not None:
            self._join_transport = Transport(name="join", curve=ClientCurve(join_keypair))
            self._join_clients = {
                a: RpcClient(
                    a, server_uuid, transport=self._join_transport, server_key=keys.get(a, "")
                )
                for a in self.coordinators
            }
        self._join_refusals: dict[str, str] = {}
        self.joined = False  # a JoinServer call admitted this server (this process)
        # address -> the last refusal logged, and whether at INFO: this server's key refused
        # in its first handshakes.ADMISSION_WINDOW_S is admission at work (local-cluster up
        # logs its principal after starting it), a WARNING only if still refused after it.
        self._refusals: dict[str, tuple[str, bool]] = {}
        self._started_s = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tserver-heartbeat", daemon=True)
        self.beats = 0
        # What the coordinator leader last said: this server is enlisted and live (for
        # /readyz); False until a leader says so, and again when it asks to enlist.
        self.enlisted = False

    def start(self) -> Heartbeater:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat_once()
            except Exception:  # a bug here must not stop heartbeats for good
                log.exception("heartbeat round failed")
            self._stop.wait(self.interval_s)

    def _tablet_reports(self) -> tuple[dict[str, bytes] | None, dict[str, bytes], set[str]]:
        """This beat's reports: (every replica's, when some node needs a full report or a
        scan is due, else None; those looked at; the ids looked at). Serialized, so that
        "changed" is a comparison of bytes."""
        now = time.monotonic()
        every = self._changes is None or now - self._scanned_s >= SCAN_INTERVAL_S
        every = every or any(n.full_due and n.answered for n in self._nodes.values())
        if self._changes is not None:
            for t in self._changes():
                self._recheck[t] = RECHECK_BEATS
        if every:
            self._scanned_s = now
            self.scans += 1
            built = self._build(None)
            look = set(built) | set(self._recheck)
            for n in self._nodes.values():
                look |= n.taken.keys()  # those not built any more: gone
        else:
            look = set(self._recheck)
            for n in self._nodes.values():
                look |= n.pending
            built = self._build(look) if look else {}
        for t in list(self._recheck):
            self._recheck[t] -= 1
            if self._recheck[t] <= 0:
                del self._recheck[t]
        return (built if every else None), built, look

    def _build(self, ids: Collection[str] | None) -> dict[str, bytes]:
        """The reports of `ids` (all: None), serialized; the messages themselves are kept in
        `_built_msgs` for this beat's requests (not parsed back from the bytes)."""
        out = {}
        self._built_msgs = {}
        for r in self._reports(ids):
            msg = to_coordinator_report(r, self.server_uuid)
            self._built_msgs[r.tablet_id] = msg
            out[r.tablet_id] = msg.SerializeToString()
        self.reports_built += len(out)
        return out

    def _request_for(
        self, node: _NodeReports, every: dict[str, bytes] | None, built: dict[str, bytes],
        look: set[str], base: cpb.HeartbeatRequest,
    ) -> tuple[cpb.HeartbeatRequest, dict[str, bytes], list[str]]:  # fmt: skip
        """The request to one node: full, or the changes since what it took; with what it
        takes if it answers (reports, gone ids)."""
        request = cpb.HeartbeatRequest()
        request.CopyFrom(base)
        if node.full_due and every is not None:
            send, gone = every, list(node.taken)
        elif node.full_due:  # not answering: no reports until it does (and asks)
            request.incremental = True
            send, gone = {}, []
        else:
            request.incremental = True
            send = {
                t: b for t in look if (b := built.get(t)) is not None and node.taken.get(t) != b
            }
            gone = [t for t in look if t not in built and t in node.taken]
            request.vanished_tablet_ids.extend(gone)
        request.tablets.extend(self._built_msgs[t] for t in send)  # built this beat
        return request, send, gone

    def _taken(self, node: _NodeReports, request, send: dict[str, bytes], gone) -> None:
        if not request.incremental:
            node.taken = dict(send)
            node.full_due = False
        else:
            node.taken.update(send)
            for t in gone:
                node.taken.pop(t, None)
        node.pending.difference_update(send)
        node.pending.difference_update(gone)

    def beat_once(self) -> None:
        every, built, look = self._tablet_reports()
        request = cpb.HeartbeatRequest(
            server_uuid=self.server_uuid,
            address=self._address(),
            http_address=self._http_address(),
        )
        if self._principals is not None:
            request.principals_version = self._principals.version
        try:
            disk = self._disk()
        except OSError as e:  # statvfs failed: the heartbeat goes without it
            log.warning("heartbeat: cannot read the file system's space: %s", e)
            disk = None
        if disk is not None:
            request.disk.CopyFrom(disk)
        answered = 0
        key_refused = 0
        base = request
        for address in self.coordinators:
            if self._stop.is_set():
                return
            node = self._nodes[address]
            request, send, gone = self._request_for(node, every, built, look, base)
            try:
                answer = self._call(address, "Heartbeat", request, cpb.HeartbeatResponse)
            except errors.RpcError as err:
                node.answered = False
                if request.incremental:
                    node.pending.update(send)
                    node.pending.update(gone)
                if isinstance(err, errors.Unauthenticated):
                    key_refused += 1
                if isinstance(err, (errors.Unauthenticated, errors.PermissionDenied)):
                    # Not admitted (yet), or a key mismatch: said once per change of reason.
                    waiting = (
                        isinstance(err, errors.Unauthenticated)
                        and time.monotonic() - self._started_s < handshakes.ADMISSION_WINDOW_S
                    )
                    said = self._refusals.get(address)
                    if said is None or said[0] != err.message or (said[1] and not waiting):
                        self._refusals[address] = (err.message, waiting)
                        log.log(
                            logging.INFO if waiting else logging.WARNING,
                            "heartbeat to %s refused: %s%s",
                            address,
                            err.message,
                            " (expected until this server's key is admitted)" if waiting else "",
                        )
                else:
                    log.debug("heartbeat to %s failed: %s", address, err)
                continue
            self._refusals.pop(address, None)
            node.answered = True
            self._taken(node, request, send, gone)
            if answer.needs_full_report:
                node.full_due = True
            answered += 1
            if answer.is_leader:
                self.enlisted = not answer.needs_enlist
                if self._principals is not None:
                    table = answer.principals if answer.HasField("principals") else None
                    self._principals.heard_leader(table)
                    if table is not None:
                        base.principals_version = table.version
            if answer.is_leader and answer.needs_enlist:
                enlist = cpb.EnlistServerRequest(
                    server_uuid=self.server_uuid, address=request.address
                )
                try:
                    self._call(address, "EnlistServer", enlist, cpb.EnlistServerResponse)
                    log.info("enlisted with the coordinator leader at %s", address)
                    self.enlisted = True
                except errors.RpcError as err:
                    log.warning("enlisting at %s failed: %s", address, err)
        self.beats += 1
        if self._join_transport is not None:
            if answered:  # this server's key is admitted: the token is not needed again
                self._drop_join_token()
            elif key_refused:
                self._join()

    def _join(self) -> None:
        """One JoinServer attempt per coordinator node, stopping at the first admission."""
        request = cpb.JoinServerRequest(
            request_id=cpb.RequestId(client_id=f"join-{self.server_uuid}", seq=1),
            server_uuid=self.server_uuid,
            public_key=self._public_key,
        )
        for address in self.coordinators:
            if self._stop.is_set():
                return
            try:
                self._call(
                    address,
                    "JoinServer",
                    request,
                    cpb.JoinServerResponse,
                    clients=self._join_clients,
                    uuids=self._join_uuids,
                )
            except errors.NotLeader:
                continue
            except errors.RpcError as err:
                level = logging.DEBUG
                why = ""
                if isinstance(err, (errors.Unauthenticated, errors.PermissionDenied)):
                    level = logging.WARNING
                if isinstance(err, errors.Unauthenticated):
                    why = " (the token's key is not admitted: spent, revoked or unknown)"
                if self._join_refusals.get(address) != err.message:
                    self._join_refusals[address] = err.message
                    log.log(
                        level,
                        "joining with the join token at %s refused%s: %s",
                        address,
                        why,
                        err.message,
                    )
                continue
            log.info(
                "admitted by the coordinator leader at %s with a join token: tablet server %s, "
                "key %s",
                address,
                self.server_uuid,
                self._public_key,
            )
            self.joined = True
            return

    def _drop_join_token(self) -> None:
        transport, self._join_transport = self._join_transport, None
        self._join_clients = {}
        if transport is not None:
            transport.close()

    def _call(self, address: str, method: str, request, response_type, *, clients=None, uuids=None):
        clients = self._clients if clients is None else clients
        uuids = self._uuids if uuids is None else uuids
        uuid = uuids.get(address)
        if uuid is None:
            uuid = clients[address].ping(timeout_s=CALL_TIMEOUT_S).uuid
            uuids[address] = uuid
        try:
            return clients[address].call(
                uuid, f"Coordinator.{method}", request, response_type, timeout_s=CALL_TIMEOUT_S
            )
        except (errors.InvalidName, errors.TimedOut, errors.Unavailable):
            # The node may have been replaced at this address: learn its UUID again.
            uuids.pop(address, None)
            raise

    def close(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        self._transport.close()
        self._drop_join_token()

    def __enter__(self) -> Heartbeater:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def disk_report(space, *, count_root: bool = True) -> cpb.DiskReport:
    """A tservers.fs.DiskSpace as the coordinator reads it. `count_root` False: the bytes
    under the root as last counted, not counted again now (while the tablets open at
    start-up: the first count stats every file of every replica, 1-2 s of the heartbeat
    thread's CPU at 10,000 replicas, which the opening threads want then)."""
    st = space.state()
    return cpb.DiskReport(
        total_bytes=st.total_bytes,
        free_bytes=st.free_bytes,
        used_bytes=st.used_bytes,
        reserved_bytes=st.reserved_bytes,
        full=st.full,
        root_bytes=space.root_bytes() if count_root else space.root_bytes_counted(),
    )
