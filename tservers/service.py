"""The TServer rpc service: tablet administration, writes and scans over the rpc layer.

Methods (request and response messages in rpc/protocols/tserver.proto):
  TServer.CreateTablet, TServer.DeleteTablet (tombstone), TServer.AlterSchema,
  TServer.Write (rows as Arrow IPC sidecars, one per operation block),
  TServer.Scan (Arrow IPC record batches as sidecars; open scanners continue with scanner_id),
  TServer.ListTablets, TServer.Status,
  TServer.Consensus (a batch of per-tablet Raft messages for this server's driver).
Writes are taken by a tablet's Raft leader only (NOT_LEADER with a hint elsewhere); a new
scan first confirms leadership through the core's read-index (linearizable reads).
Every error is an rpc.errors class, so clients get a status code and a clear message.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from rpc import heap
from rpc.errors import BadRequest, InvalidName, NotFound, Throttled
from rpc.protocols.tserver_pb2 import (
    AlterSchemaRequest,
    AlterSchemaResponse,
    BeginCopySessionRequest,
    BeginCopySessionResponse,
    CancelTabletCopyRequest,
    CancelTabletCopyResponse,
    ChangeConfigRequest,
    ChangeConfigResponse,
    ConfigChangeTypePB,
    ConsensusRequest,
    ConsensusResponse,
    CreateTabletRequest,
    CreateTabletResponse,
    DeleteTabletRequest,
    DeleteTabletResponse,
    EndCopySessionRequest,
    EndCopySessionResponse,
    FetchCopyChunkRequest,
    GetSchemaRequest,
    GetSchemaResponse,
    ListTabletsRequest,
    ListTabletsResponse,
    OpType,
    ScanRequest,
    ScanResponse,
    StartTabletCopyRequest,
    StartTabletCopyResponse,
    StatusRequest,
    StatusResponse,
    WriteRequest,
    WriteResponse,
)
from rpc.protocols.tserver_pb2 import MemberType as MemberTypePB
from rpc.sendbuffers import SendBuffers
from rpc.server import CallContext, Reply, RpcServer
from tservers.consensus.types import INDEX_MAX, ConfigChange, ConfigChangeType, MemberType
from tservers.consensus_wire import (
    BATCH_MESSAGES_MAX,
    WireError,
    check_address,
    check_range,
    check_uuid,
    decode_request,
)
from tservers.tablet.dedup import RequestId
from tservers.tablet.manager import TabletManager, check_tablet_id

log = logging.getLogger(__name__)

SCANNERS_MAX = 256
SCANNER_IDLE_S = 60.0
SCAN_BATCH_ROWS_DEFAULT = 65_536  # 4,096 halved the full scan rate (design/storage.md)
SCAN_BATCH_ROWS_MAX = 65_536
SCAN_RESPONSE_BYTES_MAX = 16 << 20
SCAN_RESPONSE_BATCHES_MAX = 64
# After a scan that sent this much, the memory its answers and merges freed is handed back.
SCAN_RELEASE_BYTES_MIN = 4 << 20
WRITE_BLOCKS_MAX = 64


@dataclass(slots=True)
class _Scanner:
    pieces: Iterator[pa.Table]  # the tablet's result, made as asked (Tablet.scan_pieces)
    head: pa.Table | None  # made, not sent yet
    batch_rows: int
    schema_pb: object
    last_used: float
    arrow_schema: pa.Schema
    sent: int = 0
    sent_bytes: int = 0  # over all its answers
    heap_bytes: int = 0  # of its answers' buffers from malloc, not ANSWER_BUFFERS


def ipc_batch(batch: pa.RecordBatch, counts: _Scanner | None = None) -> memoryview:
    """One batch as an Arrow IPC stream: a view of Arrow's buffer, not a copy (the rpc layer
    sends a large frame without copying it too). Written into one buffer of its final size
    (the schema's message, the batch's, the end marker): a growing stream reallocates and
    copies as it doubles, and leaves its smaller buffers behind as garbage.

    The buffer comes from the system allocator (ANSWER_POOL), not Arrow's default
    (mimalloc): an answer's buffers are written once, handed to the rpc's I/O thread and
    freed there when sent. From mimalloc, a server's first scans and the first after it
    idled put their answers on fresh transparent huge pages (mimalloc asks for them), each
    zeroed whole by the kernel on first touch: 140-200 ms of server CPU for a 1M-row scan
    of one run instead of 20-40 (design/storage.md, "The fixed cost of a scan").

    A buffer of some hundreds of KiB or more is a mapping of `ANSWER_BUFFERS`, reused from
    one answer to the next (rpc/sendbuffers.py): a buffer of its own each time is a new
    mapping whose every page the kernel faults in and zeroes. Where the pool declines,
    glibc's malloc as before, and `counts.heap_bytes` (the scanner's) adds the size."""
    size = batch.schema.serialize().size + pa.ipc.get_record_batch_size(batch) + IPC_SLACK_BYTES
    buf = ANSWER_BUFFERS.get(size)
    if buf is None:
        buf = pa.allocate_buffer(size, memory_pool=ANSWER_POOL)
        if counts is not None:
            counts.heap_bytes += size
    out = pa.FixedSizeBufferWriter(buf)
    with pa.ipc.new_stream(out, batch.schema) as w:
        w.write_batch(batch)
    return memoryview(buf)[: out.tell()]


# Room for the stream's end marker (8 bytes) and padding beyond the two messages' sizes.
IPC_SLACK_BYTES = 64
# Where answers' IPC buffers are allocated (see ipc_batch): glibc's malloc, which maps a
# large buffer in 4 KiB pages and unmaps it when freed (no huge page zeroed whole, nothing
# kept per thread).
ANSWER_POOL = pa.system_memory_pool()
# Answers' buffers reused (see ipc_batch): at most 96 MiB of mappings, unmapped after 5 s
# unused.
ANSWER_BUFFERS = SendBuffers()


# Test-only broken builds of the read path (tests/nemesis/test_broken_builds.py), off
# unless this variable is set; no flag or config reaches it. Read once per service:
# "any": a scan skips the read index, so any replica answers from its own state;
# "leader": a replica answers while it believes it leads, without confirming it.
UNSAFE_READS_ENV = "LOGCENTRIC_TEST_UNSAFE_READS"


class TServerService:
    """Handlers of the TServer methods; registers itself on an RpcServer."""

    def __init__(self, manager: TabletManager, address_fn) -> None:
        self.manager = manager
        self._address_fn = address_fn
        self._unsafe_reads = os.environ.get(UNSAFE_READS_ENV, "")  # test-only
        self._scanners: dict[str, _Scanner] = {}
        self._scanners_lock = threading.Lock()
        # Expires idle scanners while any is open, so an abandoned one does not keep its
        # snapshot (and the blocks a compaction unlinked) until the next Scan call.
        self._reaper: threading.Thread | None = None
        # Rows this server wrote (as leader) and sent in scan answers, for the metrics.
        self._counts_lock = threading.Lock()
        self.rows_written = 0
        self.rows_scanned = 0

    def register(self, server: RpcServer) -> None:
        server.register("TServer.CreateTablet", CreateTabletRequest, self.create_tablet)
        # Privileged (rpc/privileged.py): replica deletion and membership changes.
        server.register(
            "TServer.DeleteTablet", DeleteTabletRequest, self.delete_tablet, privileged=True
        )
        server.register("TServer.AlterSchema", AlterSchemaRequest, self.alter_schema)
        server.register("TServer.Write", WriteRequest, self.write)
        server.register("TServer.Scan", ScanRequest, self.scan)
        server.register("TServer.GetSchema", GetSchemaRequest, self.get_schema)
        server.register("TServer.ListTablets", ListTabletsRequest, self.list_tablets)
        server.register("TServer.Status", StatusRequest, self.status)
        server.register(
            "TServer.ChangeConfig", ChangeConfigRequest, self.change_config, privileged=True
        )
        server.register(
            "TServer.StartTabletCopy", StartTabletCopyRequest, self.start_copy, privileged=True
        )
        server.register("TServer.BeginCopySession", BeginCopySessionRequest, self.begin_copy)
        server.register("TServer.FetchCopyChunk", FetchCopyChunkRequest, self.fetch_chunk)
        server.register("TServer.EndCopySession", EndCopySessionRequest, self.end_copy)
        server.register("TServer.CancelTabletCopy", CancelTabletCopyRequest, self.cancel_copy)
        # Inline (on the rpc I/O thread): it only queues messages for the driver, and it must
        # never wait behind writes that occupy every worker while they wait for a commit
        # that needs these very messages.
        server.register(
            "TServer.Consensus", ConsensusRequest, self.consensus, inline=True, one_way=True
        )

    # ------------------------------------------------------------ tablet copy
    def start_copy(self, req: StartTabletCopyRequest, ctx: CallContext) -> StartTabletCopyResponse:
        if self.manager.disk is not None:  # refused now, not later in the job
            check_tablet_id(req.tablet_id)
            self.manager.disk.require(f"tablet copy of {req.tablet_id} onto this server")
        self.manager.copy_jobs.start(req)
        return StartTabletCopyResponse()

    def cancel_copy(
        self, req: CancelTabletCopyRequest, ctx: CallContext
    ) -> CancelTabletCopyResponse:
        check_tablet_id(req.tablet_id)
        self.manager.copy_jobs.cancel(req.tablet_id)
        return CancelTabletCopyResponse()

    def begin_copy(
        self, req: BeginCopySessionRequest, ctx: CallContext
    ) -> BeginCopySessionResponse:
        check_tablet_id(req.tablet_id)
        return self.manager.copy_source.begin(req)

    def fetch_chunk(self, req: FetchCopyChunkRequest, ctx: CallContext) -> Reply:
        resp, data = self.manager.copy_source.fetch(req)
        return Reply(resp, [data])

    def end_copy(self, req: EndCopySessionRequest, ctx: CallContext) -> EndCopySessionResponse:
        return self.manager.copy_source.end(req)

    # ------------------------------------------------------------ consensus
    def change_config(self, req: ChangeConfigRequest, ctx: CallContext) -> ChangeConfigResponse:
        """AddServer / RemoveServer / ChangeRole at the tablet's leader (design/consensus.md
        section 5): answered once the change is committed and applied here."""
        check_tablet_id(req.tablet_id)
        kinds = {
            ConfigChangeTypePB.ADD_SERVER: ConfigChangeType.ADD_MEMBER,
            ConfigChangeTypePB.REMOVE_SERVER: ConfigChangeType.REMOVE_MEMBER,
            ConfigChangeTypePB.CHANGE_ROLE: ConfigChangeType.CHANGE_MEMBER_TYPE,
        }
        kind = kinds.get(req.type)
        if kind is None:
            raise BadRequest(f"unknown config change type {req.type}")
        if not req.peer.uuid:
            raise BadRequest("config change names no peer uuid")
        try:
            check_uuid("config change peer", req.peer.uuid)
            if req.peer.address:
                check_address(f"peer {req.peer.uuid} address", req.peer.address)
            if req.HasField("cas_config_index"):
                check_range("cas_config_index", req.cas_config_index, -1, INDEX_MAX)
        except WireError as e:
            raise BadRequest(f"bad config change: {e}") from e
        member_type = MemberType.VOTER
        if kind is not ConfigChangeType.REMOVE_MEMBER:
            if req.peer.member_type == MemberTypePB.NON_VOTER:
                member_type = MemberType.NON_VOTER
            elif req.peer.member_type != MemberTypePB.VOTER:
                raise BadRequest("config change needs a member type (VOTER or NON_VOTER)")
        if kind is ConfigChangeType.ADD_MEMBER and not req.peer.address:
            raise BadRequest(f"new peer {req.peer.uuid} has no address")
        change = ConfigChange(kind, req.peer.uuid, member_type, req.peer.promote)
        cas = req.cas_config_index if req.HasField("cas_config_index") else None
        tablet = self.manager.tablet(req.tablet_id)
        tablet.change_config(change, req.peer.address, cas, ctx.deadline)
        return ChangeConfigResponse(committed_config=tablet.cmeta.committed_config)

    def consensus(self, req: ConsensusRequest, ctx: CallContext) -> ConsensusResponse:
        """Queue Raft messages for the driver. The rpc layer checked the call's recipient;
        every message names its recipient too, and must name this server. Every field of
        every message is range-checked first (consensus_wire.decode_request): one bad
        message refuses the batch (BAD_REQUEST) and nothing of it is delivered."""
        own = self.manager.fs.uuid
        for pb in req.messages[:BATCH_MESSAGES_MAX]:
            if pb.recipient != own:
                raise InvalidName(
                    f"consensus message for {pb.recipient[:64]!r} sent to server {own}; "
                    "nothing was delivered"
                )
        try:
            msgs, addresses = decode_request(req)
        except WireError as e:
            raise BadRequest(f"bad consensus message: {e}; nothing was delivered") from e
        accepted = self.manager.driver.deliver(
            msgs, addresses, ctx.caller_uuid, opening=req.opening and not req.messages
        )
        return ConsensusResponse(accepted=accepted)

    # ------------------------------------------------------------ admin
    def create_tablet(self, req: CreateTabletRequest, ctx: CallContext) -> CreateTabletResponse:
        t = self.manager.create_tablet(req)
        return CreateTabletResponse(schema=t.sb.schema)

    def delete_tablet(self, req: DeleteTabletRequest, ctx: CallContext) -> DeleteTabletResponse:
        cas = req.cas_config_index if req.HasField("cas_config_index") else None
        if cas is not None and cas > INDEX_MAX:
            # "Delete if the committed config index is at most this": one past every index
            # is no CAS (one below -1 only ever fails, as CAS_FAILED).
            raise BadRequest(f"cas_config_index {cas} above {INDEX_MAX}")
        return DeleteTabletResponse(last_op_id=self.manager.delete_tablet(req.tablet_id, cas))

    def alter_schema(self, req: AlterSchemaRequest, ctx: CallContext) -> AlterSchemaResponse:
        check_tablet_id(req.tablet_id)
        new = self.manager.alter_schema(
            req.tablet_id,
            req.expected_version,
            req.add_columns,
            req.drop_columns,
            ctx.deadline,
            new_version=req.new_version,
            next_column_id=req.next_column_id,
        )
        return AlterSchemaResponse(schema=new)

    def get_schema(self, req: GetSchemaRequest, ctx: CallContext) -> GetSchemaResponse:
        check_tablet_id(req.tablet_id)
        return GetSchemaResponse(schema=self.manager.tablet(req.tablet_id).sb.schema)

    def list_tablets(self, req: ListTabletsRequest, ctx: CallContext) -> ListTabletsResponse:
        if req.brief or req.not_serving_only:
            reps, n = self.manager.brief_reports(not_serving_only=req.not_serving_only)
            return ListTabletsResponse(tablets=reps, replicas=n)
        reps = self.manager.reports()
        return ListTabletsResponse(tablets=reps, replicas=len(reps))

    def status(self, req: StatusRequest, ctx: CallContext) -> StatusResponse:
        m = self.manager
        writes = rows = 0
        for r in list(m.replicas.values()):
            if r.tablet is not None:
                writes += r.tablet.writes
                rows += r.tablet.rows_written
        a = m.appender
        return StatusResponse(
            uuid=m.fs.uuid,
            address=self._address_fn(),
            tablets=len(m.replicas),
            wal_groups=a.groups,
            wal_syncs=a.syncs,
            wal_entries=a.entries,
            writes=writes,
            rows_written=rows,
            wal_sync_enabled=m.wal_opts.sync,
            copies=m.copy_jobs.jobs() if m.copy_jobs is not None else [],
        )

    # ------------------------------------------------------------ data
    def write(self, req: WriteRequest, ctx: CallContext) -> WriteResponse:
        check_tablet_id(req.tablet_id)
        if len(req.ops) != len(ctx.sidecars):
            raise BadRequest(
                f"write names {len(req.ops)} operation blocks but carries "
                f"{len(ctx.sidecars)} sidecars"
            )
        if len(req.ops) > WRITE_BLOCKS_MAX:
            raise BadRequest(f"write has {len(req.ops)} blocks, at most {WRITE_BLOCKS_MAX}")
        for op in req.ops:
            if op not in (OpType.INSERT, OpType.UPSERT, OpType.UPDATE, OpType.DELETE):
                raise BadRequest(f"unknown operation type {op}")
        tablet = self.manager.tablet(req.tablet_id)
        if self.manager.disk is not None and any(op != OpType.DELETE for op in req.ops):
            # Past the reserve only deletions are taken (they let compactions free space);
            # replicated entries a follower receives are never refused (tservers/fs.py).
            self.manager.disk.require(
                f"write to tablet {req.tablet_id}",
                need_bytes=sum(len(sc) for sc in ctx.sidecars),
            )
        rid = None
        if req.HasField("request_id"):  # a resend of it is never applied twice
            rid = RequestId.from_pb(req.request_id)
            problem = rid.problem()
            if problem:
                raise BadRequest(problem)
        blocks = [(op, bytes(sc)) for op, sc in zip(req.ops, ctx.sidecars, strict=True)]
        result = tablet.write(req.schema_version, blocks, ctx.deadline, rid)
        with self._counts_lock:  # metrics (tservers/metrics.py)
            self.rows_written += result.rows
        return WriteResponse(op_id=result.op_id, rows=result.rows)

    def scan(self, req: ScanRequest, ctx: CallContext) -> Reply:
        now = time.monotonic()
        self._expire(now)
        if req.scanner_id:
            # Taken out of the registry while served, so one scanner never serves two calls.
            with self._scanners_lock:
                sc = self._scanners.pop(req.scanner_id, None)
            if req.close:
                return Reply(ScanResponse())
            if sc is None:
                raise NotFound(f"scanner {req.scanner_id} not found (expired, finished or in use)")
        else:
            check_tablet_id(req.tablet_id)
            tablet = self.manager.tablet(req.tablet_id)
            if tablet.group is not None and not self._unsafe_reads:
                # Linearizable: leadership confirmed by a majority after this call arrived,
                # and everything committed before it applied here.
                tablet.group.read_index(ctx.deadline)
            elif tablet.group is not None and self._unsafe_reads == "leader":
                st = tablet.group.status()  # test-only broken build (UNSAFE_READS_ENV)
                if st.role.value != "LEADER":
                    raise tablet.group.driver.not_leader(req.tablet_id, st.leader_uuid)
            batch_rows = req.batch_rows_max or SCAN_BATCH_ROWS_DEFAULT
            batch_rows = max(1, min(batch_rows, SCAN_BATCH_ROWS_MAX))
            arrow_schema, pieces = tablet.scan_pieces(
                list(req.projection),
                list(req.predicates),
                list(req.lower_bound),
                list(req.upper_bound),
                req.limit,
                ordered=not req.unordered,
            )
            sc = _Scanner(pieces, None, batch_rows, tablet.sb.schema, now, arrow_schema)
        sidecars: list = []
        size = 0
        rows = 0
        # Pieces are made here, as the answer fills (the server never holds the result).
        while size < SCAN_RESPONSE_BYTES_MAX and len(sidecars) < SCAN_RESPONSE_BATCHES_MAX:
            if sc.head is None:
                sc.head = next(sc.pieces, None)
                if sc.head is None:
                    break
            part = sc.head.slice(0, sc.batch_rows).combine_chunks()
            sc.head = sc.head.slice(part.num_rows) if part.num_rows < sc.head.num_rows else None
            for b in part.to_batches():
                data = ipc_batch(b, sc)
                sidecars.append(data)
                size += len(data)
                rows += b.num_rows
        if sc.head is None:
            sc.head = next(sc.pieces, None)
        has_more = sc.head is not None
        sc.sent += rows
        sc.sent_bytes += size
        if not has_more and sc.sent_bytes >= SCAN_RELEASE_BYTES_MIN:
            # Arrow's allocator (mimalloc) keeps what the answers freed once sent (their
            # batches, the merges' slabs) for this thread's next allocations: handed back
            # to the system when a large scan ends, the heap of a server that scans stays
            # near its idle size. Not between the answers of one scan: memory handed back
            # is faulted in again (and zeroed) by the next answer, which cost more than the
            # merge itself (design/storage.md, "Scans without a merge"); 1-2 ms a call.
            pa.default_memory_pool().release_unused()
            # And glibc's arenas, where the answers' buffers (ANSWER_POOL) stay once the
            # dynamic mmap threshold has risen to their size (rpc/heap.py): only after
            # answers that ANSWER_BUFFERS did not hold (a trim costs ~1-3 ms, 8% of a 1M-row
            # scan's server samples when it ran after every scan).
            if sc.heap_bytes >= SCAN_RELEASE_BYTES_MIN:
                heap.trim()
        with self._counts_lock:
            self.rows_scanned += rows
        resp = ScanResponse(has_more=has_more, rows=rows, schema=sc.schema_pb)
        if not sidecars and sc.sent == 0:
            # An empty result still tells the client its columns.
            sidecars.append(ipc_batch(pa.RecordBatch.from_pylist([], schema=sc.arrow_schema)))
        if has_more:
            sc.last_used = now
            with self._scanners_lock:
                if not req.scanner_id and len(self._scanners) >= SCANNERS_MAX:
                    raise Throttled(f"{SCANNERS_MAX} scanners open", retry_after_ms=500)
                sid = req.scanner_id or secrets.token_hex(8)
                self._scanners[sid] = sc
                if self._reaper is None:
                    self._reaper = threading.Thread(
                        target=self._reap, name="tserver-scanner-reaper", daemon=True
                    )
                    self._reaper.start()
            resp.scanner_id = sid
        return Reply(resp, sidecars)

    def _reap(self) -> None:
        """While scanners are open: expire the idle ones every quarter TTL (5 s at most);
        ends when none is left (the next scanner starts another)."""
        while True:
            time.sleep(min(SCANNER_IDLE_S / 4, 5.0))
            self._expire(time.monotonic())
            with self._scanners_lock:
                if not self._scanners:
                    self._reaper = None
                    return

    def _expire(self, now: float) -> None:
        with self._scanners_lock:
            dead = [k for k, s in self._scanners.items() if now - s.last_used > SCANNER_IDLE_S]
            for k in dead:
                del self._scanners[k]
        if dead:
            log.info("expired %d idle scanners", len(dead))
