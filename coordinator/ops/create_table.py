"""CreateTable: hash partitioning into N tablets, replicas placed across live tablet servers.

Commit point: the STARTED record with the whole decision (table id, schema with column ids,
tablet ids, partition bounds, placement). `complete` creates every replica on its tablet
server, up to CREATE_CALLS_PARALLEL_MAX at a time (idempotent; replicas on down servers are
skipped and left to re-replication), then
appends DONE invalidating STARTED, with the skipped replicas: the re-replication policy
creates those that never came to exist once their servers are back
(coordinator/replication.py, `create_missing`), so that a table acknowledged while every
tablet server was down still gets its tablets.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from coordinator.catalog import (
    REPLICATION_FACTOR_MAX,
    TABLETS_PER_TABLE_MAX,
    Catalog,
    OpResult,
    PendingOp,
    TableInfo,
    TableState,
    TabletInfo,
)
from coordinator.ops.common import (
    DOWN_NAMED_MAX,
    CompletionContext,
    call_replica,
    check_factor_placeable,
    check_new_name,
    check_request_id,
    check_schema,
    header,
)
from rpc.errors import AlreadyExists, BadRequest, NoSpace
from rpc.protocols import coordinator_pb2 as pb

KIND = "create_table"
DEFAULT_REPLICATION_FACTOR = 3
# CreateTablet calls in flight at once for one CreateTable (issue 28: one after another, a
# create cost about 3.8 ms per replica).
CREATE_CALLS_PARALLEL_MAX = 16


def table_id_of(op_id: int) -> str:
    return f"t{op_id}"


def tablet_id_of(table_id: str, bucket: int) -> str:
    return f"{table_id}-{bucket}"


def decide(catalog: Catalog, request: pb.CreateTableRequest, op_id: int) -> pb.LogRecord:
    check_request_id(request.request_id)
    check_new_name(request.name)
    check_schema(request.schema)
    if request.name in catalog.names:
        raise AlreadyExists(f"a table named {request.name!r} exists")
    n = request.num_tablets
    if not 1 <= n <= TABLETS_PER_TABLE_MAX:
        raise BadRequest(f"num_tablets must be 1..{TABLETS_PER_TABLE_MAX}, got {n}")
    live = catalog.placeable_servers()  # retired servers get no new replica
    # 0 (unset): the default, 3 replicas when the cluster has 3 or more tablet servers not
    # retired, else one per server. Servers that are DOWN count: a server down for a moment
    # must not leave new tables at a lower factor for good (2 replicas survive no failure);
    # such a create is refused until it is back (UNAVAILABLE: clients retry), as Kudu
    # refuses it, unless the factor is given.
    retired = catalog.retired_servers()
    known = [s for s in catalog.servers.values() if s.uuid not in retired]
    rf = request.replication_factor or min(DEFAULT_REPLICATION_FACTOR, max(1, len(known)))
    if not 1 <= rf <= REPLICATION_FACTOR_MAX:
        raise BadRequest(f"replication_factor must be 1..{REPLICATION_FACTOR_MAX}, got {rf}")
    given = "replication factor" if request.replication_factor else "the default replication factor"
    check_factor_placeable(catalog, rf, given)
    if len(live) < rf:
        # Live and not retired are enough, but some are full: their file systems are at
        # or below their reserved free space (their heartbeats said so). Refused rather
        # than filling a disk; not retried by clients (space comes back only when freed).
        full = catalog.full_servers()
        shown = []
        for uuid in sorted(full)[:DOWN_NAMED_MAX]:
            d = catalog.disks[uuid]
            shown.append(f"{uuid} ({d.free_bytes} bytes free, reserve {d.reserved_bytes})")
        more = ", ..." if len(full) > DOWN_NAMED_MAX else ""
        raise NoSpace(
            f"{given} {rf} above the {len(live)} live tablet servers with free space above "
            f"their reserve: {len(full)} full: {', '.join(shown)}{more}; free space (drop "
            "tables), add tablet servers, or give a lower factor"
        )

    schema = pb.Schema(version=1)
    for i, column in enumerate(request.schema.columns, start=1):
        c = schema.columns.add()
        c.CopyFrom(column)
        c.id = i
    schema.next_column_id = len(schema.columns) + 1

    table_id = table_id_of(op_id)
    load = catalog.replica_counts()
    order = [s.uuid for s in live]
    record = pb.LogRecord()
    ct = record.create_table
    ct.header.CopyFrom(header(op_id, request.request_id, pb.STARTED))
    ct.table_id = table_id
    ct.name = request.name
    ct.schema.CopyFrom(schema)
    ct.replication_factor = rf
    for bucket in range(n):
        # Least loaded first; ties broken by a rotation so that tablets spread evenly, and
        # no server twice for one tablet.
        ranked = sorted(
            range(len(order)),
            key=lambda j, b=bucket: (load.get(order[j], 0), (j - b) % len(order)),
        )
        chosen = [order[j] for j in ranked[:rf]]
        for uuid in chosen:
            load[uuid] = load.get(uuid, 0) + 1
        t = ct.tablets.add()
        t.tablet_id = tablet_id_of(table_id, bucket)
        t.partition.hash_bucket = bucket
        t.partition.num_buckets = n
        t.replica_uuids.extend(chosen)
    return record


def skipped_by_tablet(entries: Sequence[str]) -> dict[str, set[str]]:
    """The DONE record's `skipped_replicas` ("<tablet id>/<server uuid>") by tablet."""
    out: dict[str, set[str]] = {}
    for entry in entries:
        tablet_id, _, uuid = entry.rpartition("/")
        if tablet_id and uuid:
            out.setdefault(tablet_id, set()).add(uuid)
    return out


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    return ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    ct = record.create_table
    op_id = ct.header.op_id
    done = ct.header.phase == pb.DONE
    rid = ct.header.request_id
    skipped = skipped_by_tablet(ct.skipped_replicas) if done else {}
    for t in ct.tablets:
        catalog.tablets[t.tablet_id] = TabletInfo(
            t.tablet_id,
            ct.table_id,
            t.partition.hash_bucket,
            t.partition.num_buckets,
            tuple(t.replica_uuids),
            tuple(u for u in t.replica_uuids if u in skipped.get(t.tablet_id, ())),
        )
    catalog.put_table(
        TableInfo(
            table_id=ct.table_id,
            name=ct.name,
            schema=ct.schema,
            replication_factor=ct.replication_factor,
            tablet_ids=tuple(t.tablet_id for t in ct.tablets),
            state=TableState.RUNNING if done else TableState.CREATING,
            create_record_id=entry_id,
            pending_op_id=0 if done else op_id,
            requests=((rid.client_id, rid.seq, ct.schema.version),) if rid.seq else (),
        )
    )
    if done:
        catalog.pending.pop(op_id, None)
    else:
        catalog.pending[op_id] = PendingOp(op_id, KIND, record)
    catalog.record_session(
        rid, OpResult(op_id, KIND, done, table_id=ct.table_id, schema_version=ct.schema.version)
    )


def complete(ctx: CompletionContext, record: pb.LogRecord) -> pb.LogRecord:
    ct = record.create_table
    assert ct.header.phase == pb.STARTED
    with ctx.catalog.lock:
        servers = dict(ctx.catalog.servers)

    def create_one(tablet: pb.TabletPlacement, uuid: str) -> bool:
        peers = [servers[u] for u in tablet.replica_uuids if u in servers]
        started = time.monotonic()
        try:
            return _create_one(tablet, uuid, peers)
        finally:
            ctx.timed("replica_call", time.monotonic() - started)

    def _create_one(tablet: pb.TabletPlacement, uuid: str, peers) -> bool:
        return call_replica(
            ctx,
            f"{KIND}.{{}}_create_tablet",
            uuid,
            tablet.tablet_id,
            lambda server: ctx.gateway.create_tablet(
                server, ct.table_id, ct.name, tablet, ct.schema, peers, ctx.call_timeout_s
            ),
        )

    # Every replica's call (each with call_replica's retries and skips) on a bounded pool.
    # All of them finish before anything is decided: a call that raises (a live server
    # unreachable after its attempts) leaves the operation pending, to be rolled forward
    # later, as when the calls ran one after another; the others' replicas exist by then
    # and creating them again is a no-op.
    calls = [(t, u) for t in ct.tablets for u in t.replica_uuids]
    workers = max(1, min(CREATE_CALLS_PARALLEL_MAX, len(calls)))
    started = time.monotonic()
    with ThreadPoolExecutor(workers, thread_name_prefix="create-tablet") as pool:
        futures = [pool.submit(create_one, t, u) for t, u in calls]
    ctx.timed("calls", time.monotonic() - started)
    skipped = [
        f"{t.tablet_id}/{u}" for (t, u), f in zip(calls, futures, strict=True) if not f.result()
    ]
    done = pb.LogRecord()
    done.CopyFrom(record)
    done.create_table.header.phase = pb.DONE
    done.create_table.skipped_replicas.extend(skipped)
    ctx.crash(f"{KIND}.before_done")
    ctx.commit(done, (ct.header.op_id,))
    ctx.crash(f"{KIND}.after_done")
    return done


def response(result: OpResult) -> pb.CreateTableResponse:
    return pb.CreateTableResponse(table_id=result.table_id)
