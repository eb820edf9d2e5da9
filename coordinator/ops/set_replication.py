"""ChangeReplicationFactor (SetReplication record): a table's target number of voters.

Single phase (DONE at the commit point): nothing is called on the tablet servers. The
re-replication policy (coordinator/replication.py) converges every tablet of the table to
the new factor: it adds replicas (NON_VOTER with promote) when live voters are fewer, and
removes voters when there are more. The record stays live while the table exists, a later
SetReplication of the same table invalidates it, and DropTable makes it moot. Setting the
factor a table already has logs nothing (the request is idempotent in effect).
"""

from __future__ import annotations

import dataclasses

from coordinator.catalog import REPLICATION_FACTOR_MAX, Catalog, OpResult
from coordinator.ops.common import (
    check_factor_placeable,
    check_request_id,
    header,
    record_superseded,
    superseded,
    table_for_change,
    table_requests,
)
from rpc.errors import BadRequest
from rpc.protocols import coordinator_pb2 as pb

KIND = "set_replication"


def decide(catalog: Catalog, request: pb.SetReplicationRequest, op_id: int) -> pb.LogRecord | None:
    check_request_id(request.request_id)
    table = table_for_change(catalog, request.name)
    rf = request.replication_factor
    if not 1 <= rf <= REPLICATION_FACTOR_MAX:
        raise BadRequest(f"replication_factor must be 1..{REPLICATION_FACTOR_MAX}, got {rf}")
    check_factor_placeable(catalog, rf)
    if rf == table.replication_factor:
        return None
    record = pb.LogRecord()
    sr = record.set_replication
    sr.header.CopyFrom(header(op_id, request.request_id, pb.DONE))
    sr.table_id = table.table_id
    sr.replication_factor = rf
    sr.old_replication_factor = table.replication_factor
    sr.previous_record_id = table.replication_record_id
    # The previous record's request is among the table's: carried, as it is invalidated.
    sr.superseded.extend(superseded(table.requests, table.table_id))
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    previous = record.set_replication.previous_record_id
    return (previous,) if previous else ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    sr = record.set_replication
    rid = sr.header.request_id
    record_superseded(catalog, sr.superseded)
    table = catalog.tables.get(sr.table_id)
    if table is not None:
        # The request joins the table's, so that the record invalidating this one (a later
        # SetReplication, or DropTable) carries its result.
        mine = (rid.client_id, rid.seq, 0) if rid.seq else None  # its result has no schema
        catalog.put_table(
            dataclasses.replace(
                table,
                replication_factor=sr.replication_factor,
                replication_record_id=entry_id,
                requests=table_requests(table, sr.superseded, mine),
            )
        )
    catalog.record_session(
        sr.header.request_id, OpResult(sr.header.op_id, KIND, True, table_id=sr.table_id)
    )


def response(result: OpResult | None) -> pb.SetReplicationResponse:
    return pb.SetReplicationResponse(table_id=result.table_id if result else "")
