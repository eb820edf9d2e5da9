"""DropTable: every replica tombstoned, then the table's records invalidated.

Commit point: the STARTED record naming the tablets and replicas to delete and the table's
live records (CreateTable, AlterTable) that become moot. `complete` deletes every replica
(idempotent; down servers skipped), then appends DONE invalidating STARTED and those moot
records, so the live log no longer mentions the table. The DONE record stays live: it
carries the results of the requests whose records it invalidated (exactly-once).
"""

from __future__ import annotations

import dataclasses

from coordinator.catalog import Catalog, OpResult, PendingOp, TableState
from coordinator.ops.common import (
    CompletionContext,
    call_replica,
    check_request_id,
    header,
    placements,
    record_superseded,
    superseded,
    table_for_change,
)
from rpc.protocols import coordinator_pb2 as pb

KIND = "drop_table"


def decide(catalog: Catalog, request: pb.DropTableRequest, op_id: int) -> pb.LogRecord:
    check_request_id(request.request_id)
    table = table_for_change(catalog, request.name)
    record = pb.LogRecord()
    dt = record.drop_table
    dt.header.CopyFrom(header(op_id, request.request_id, pb.STARTED))
    dt.table_id = table.table_id
    dt.name = table.name
    dt.tablets.extend(placements(catalog, table))
    dt.moot_record_ids.append(table.create_record_id)
    if table.alter_record_id:
        dt.moot_record_ids.append(table.alter_record_id)
    if table.replication_record_id:
        dt.moot_record_ids.append(table.replication_record_id)
    dt.superseded.extend(superseded(table.requests, table.table_id))
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    return ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    dt = record.drop_table
    op_id = dt.header.op_id
    done = dt.header.phase == pb.DONE
    record_superseded(catalog, dt.superseded)
    if done:
        catalog.remove_table(dt.table_id)
        catalog.pending.pop(op_id, None)
    else:
        table = catalog.tables.get(dt.table_id)
        if table is not None:
            catalog.put_table(
                dataclasses.replace(table, state=TableState.DROPPING, pending_op_id=op_id)
            )
        catalog.pending[op_id] = PendingOp(op_id, KIND, record)
    catalog.record_session(dt.header.request_id, OpResult(op_id, KIND, done, dt.table_id))


def complete(ctx: CompletionContext, record: pb.LogRecord) -> pb.LogRecord:
    dt = record.drop_table
    assert dt.header.phase == pb.STARTED
    skipped: list[str] = []
    for tablet in dt.tablets:
        for uuid in tablet.replica_uuids:
            ok = call_replica(
                ctx,
                f"{KIND}.{{}}_delete_tablet",
                uuid,
                tablet.tablet_id,
                lambda server, tablet_id=tablet.tablet_id: ctx.gateway.delete_tablet(
                    server, tablet_id, ctx.call_timeout_s
                ),
            )
            if not ok:
                skipped.append(f"{tablet.tablet_id}/{uuid}")
    done = pb.LogRecord()
    done.CopyFrom(record)
    done.drop_table.header.phase = pb.DONE
    done.drop_table.skipped_replicas.extend(skipped)
    ctx.crash(f"{KIND}.before_done")
    ctx.commit(done, (dt.header.op_id, *dt.moot_record_ids))
    ctx.crash(f"{KIND}.after_done")
    return done


def response(result: OpResult) -> pb.DropTableResponse:
    return pb.DropTableResponse(table_id=result.table_id)
