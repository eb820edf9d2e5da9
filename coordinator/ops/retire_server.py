"""RetireServer: the operator retires a tablet server, or cancels its retirement.

Single phase (DONE at the commit point). A retired server gets no new replica: it is left
out of placement (CreateTable), of the re-replication policy's targets and of moves, and
the policy moves every replica off it as it replaces a replica on a dead server. The
retirement is logged so that it outlives leader changes and restarts of the server; it ends
when the server is removed (RemoveServer invalidates the record) or cancelled (a record
with `retired` false, which invalidates the one before and stays live itself, so that a
node following the log incrementally sees the cancel too).

Refused with BAD_REQUEST when a table on the server could not keep its factor on the
servers left (not retired), UNAVAILABLE (retried by clients) when it could once the servers
that are down come back; asking for the state the server is already in logs nothing.
"""

from __future__ import annotations

from coordinator.catalog import Catalog, OpResult, ServerState
from coordinator.ops.common import FACTOR_RETRY_AFTER_MS, check_request_id, header
from rpc.errors import BadRequest, NotFound, Unavailable
from rpc.protocols import coordinator_pb2 as pb

KIND = "retire_server"


def decide(catalog: Catalog, request: pb.RetireServerRequest, op_id: int) -> pb.LogRecord | None:
    check_request_id(request.request_id)
    server = catalog.servers.get(request.server_uuid)
    if server is None:
        raise NotFound(f"no tablet server {request.server_uuid!r}")
    retired = not request.cancel
    was_retired, previous_id = catalog.retirements.get(server.uuid, (False, 0))
    if was_retired == retired:
        return None
    if retired:
        others = {s.uuid for s in catalog.placeable_servers()} - {server.uuid}
        needs = [
            (table.replication_factor, table.name)
            for table in catalog.tables.values()
            if any(server.uuid in catalog.current_replicas(t) for t in table.tablet_ids)
        ]
        if needs and max(needs)[0] > len(others):
            factor, name = max(needs)
            retired_now = catalog.retired_servers()
            down = sorted(
                s.uuid
                for s in catalog.servers.values()
                if s.state is not ServerState.LIVE
                and s.uuid not in retired_now
                and s.uuid != server.uuid
            )
            why = (
                f"cannot retire {server.uuid}: table {name!r} has replication factor "
                f"{factor} and {len(others)} other live tablet server(s) would remain"
            )
            if factor <= len(others) + len(down):
                # Servers that could take its replicas are only down: retried by the client.
                raise Unavailable(
                    f"{why} ({', '.join(down[:8])} DOWN): wait until they are back",
                    retry_after_ms=FACTOR_RETRY_AFTER_MS,
                )
            # Nowhere to move its replicas: refused rather than waited on for ever.
            raise BadRequest(f"{why}; add a server or lower the factor (set-replication) first")
    record = pb.LogRecord()
    rs = record.retire_server
    rs.header.CopyFrom(header(op_id, request.request_id, pb.DONE))
    rs.server_uuid = server.uuid
    rs.retired = retired
    rs.previous_record_id = previous_id
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    previous = record.retire_server.previous_record_id
    return (previous,) if previous else ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    rs = record.retire_server
    catalog.retirements[rs.server_uuid] = (rs.retired, entry_id)
    catalog.record_session(rs.header.request_id, OpResult(rs.header.op_id, KIND, True))


def response(result: OpResult | None) -> pb.RetireServerResponse:
    return pb.RetireServerResponse()
