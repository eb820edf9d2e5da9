"""AlterTable: add nullable columns, drop non-key columns, rename the table.

Commit point: the STARTED record with the old and the new schema (version + 1, new column
ids) and the new name. The catalog takes the new name and schema at once (the decision is
committed); `complete` brings every replica to the new schema version (idempotent), then
appends DONE invalidating STARTED and the table's previous AlterTable record, which the new
one makes moot (it carries the whole schema and name).

A replica whose server is not LIVE is skipped (listed in DONE's `skipped_replicas`); the
re-replication loop brings it to the table's schema once it is back (coordinator/
replication.py `alter_stale`), as it does any replica that reports an older version. A
replica found behind the old version too (it missed an earlier alter) is brought to the new
schema by this call itself (coordinator/gateway.py).
"""

from __future__ import annotations

import dataclasses

from coordinator.catalog import (
    COLUMNS_MAX,
    Catalog,
    OpResult,
    PendingOp,
    TableInfo,
    TableState,
)
from coordinator.ops.common import (
    CompletionContext,
    call_replica,
    check_column,
    check_new_name,
    check_request_id,
    header,
    placements,
    record_superseded,
    superseded,
    table_for_change,
    table_requests,
)
from rpc.errors import AlreadyExists, BadRequest
from rpc.protocols import coordinator_pb2 as pb

KIND = "alter_table"


def decide(catalog: Catalog, request: pb.AlterTableRequest, op_id: int) -> pb.LogRecord:
    check_request_id(request.request_id)
    table = table_for_change(catalog, request.name)
    new_name = request.new_name or table.name
    if new_name != table.name:
        check_new_name(new_name, "new table name")
        if new_name in catalog.names:
            raise AlreadyExists(f"a table named {new_name!r} exists")
    existing = {c.name: c for c in table.schema.columns}
    drops = list(request.drop_columns)
    if len(set(drops)) != len(drops):
        raise BadRequest("a column is dropped twice")
    for name in drops:
        column = existing.get(name)
        if column is None:
            raise BadRequest(f"no column {name!r} to drop")
        if column.is_key:
            raise BadRequest(f"cannot drop key column {name!r}")
    added: set[str] = set()
    for column in request.add_columns:
        check_column(column)
        if column.is_key or not column.nullable:
            raise BadRequest(f"added column {column.name!r} must be nullable and not a key")
        if column.name in existing or column.name in added:
            # Also when dropped in the same request: replacing a column takes two requests.
            raise BadRequest(f"column {column.name!r} exists")
        added.add(column.name)
    if new_name == table.name and not drops and not added:
        raise BadRequest("nothing to alter")

    old = table.schema
    new = pb.Schema()
    if drops or added:
        new.version = old.version + 1
        new.columns.extend(c for c in old.columns if c.name not in drops)
        next_id = old.next_column_id
        adds = []
        for column in request.add_columns:
            c = new.columns.add()
            c.CopyFrom(column)
            c.id = next_id
            next_id += 1
            adds.append(c)
        new.next_column_id = next_id
        if len(new.columns) > COLUMNS_MAX:
            raise BadRequest(f"{len(new.columns)} columns, over {COLUMNS_MAX}")
    else:
        new.CopyFrom(old)
        adds = []

    record = pb.LogRecord()
    at = record.alter_table
    at.header.CopyFrom(header(op_id, request.request_id, pb.STARTED))
    at.table_id = table.table_id
    at.old_name = table.name
    at.new_name = new_name
    at.old_schema.CopyFrom(old)
    at.new_schema.CopyFrom(new)
    at.add_columns.extend(adds)
    at.drop_columns.extend(drops)
    at.tablets.extend(placements(catalog, table))
    at.previous_alter_id = table.alter_record_id
    at.superseded.extend(superseded(table.requests, table.table_id))
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    return ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    at = record.alter_table
    op_id = at.header.op_id
    done = at.header.phase == pb.DONE
    rid = at.header.request_id
    record_superseded(catalog, at.superseded)
    table: TableInfo | None = catalog.tables.get(at.table_id)
    if table is not None:
        mine = (rid.client_id, rid.seq, at.new_schema.version) if rid.seq else None
        requests = table_requests(table, at.superseded, mine)
        catalog.put_table(
            dataclasses.replace(
                table,
                name=at.new_name,
                schema=at.new_schema,
                state=TableState.RUNNING if done else TableState.ALTERING,
                pending_op_id=0 if done else op_id,
                alter_record_id=entry_id if done else table.alter_record_id,
                requests=requests,
            )
        )
    if done:
        catalog.pending.pop(op_id, None)
    else:
        catalog.pending[op_id] = PendingOp(op_id, KIND, record)
    catalog.record_session(
        rid, OpResult(op_id, KIND, done, at.table_id, schema_version=at.new_schema.version)
    )


def complete(ctx: CompletionContext, record: pb.LogRecord) -> pb.LogRecord:
    at = record.alter_table
    assert at.header.phase == pb.STARTED
    skipped: list[str] = []
    if at.new_schema.version != at.old_schema.version:
        for tablet in at.tablets:
            for uuid in tablet.replica_uuids:
                ok = call_replica(
                    ctx,
                    f"{KIND}.{{}}_alter_schema",
                    uuid,
                    tablet.tablet_id,
                    lambda server, tablet_id=tablet.tablet_id: ctx.gateway.alter_schema(
                        server, tablet_id, at.old_schema, at.new_schema, ctx.call_timeout_s
                    ),
                )
                if not ok:
                    skipped.append(f"{tablet.tablet_id}/{uuid}")
    done = pb.LogRecord()
    done.CopyFrom(record)
    done.alter_table.header.phase = pb.DONE
    done.alter_table.skipped_replicas.extend(skipped)
    invalidates = [at.header.op_id]
    if at.previous_alter_id:
        invalidates.append(at.previous_alter_id)
    ctx.crash(f"{KIND}.before_done")
    ctx.commit(done, invalidates)
    ctx.crash(f"{KIND}.after_done")
    return done


def response(result: OpResult) -> pb.AlterTableResponse:
    return pb.AlterTableResponse(table_id=result.table_id, schema_version=result.schema_version)
