"""RemoveServer: forget a tablet server that is down (operator action).

Single phase (DONE at the commit point). Only a DOWN server may be removed (a live one
answers ILLEGAL_STATE). Its replicas stay in the tablets' configurations for the
re-replication policy. The record invalidates the server's ServerDown record (and its
RetireServer record, if any) and itself stays live, so that every node, also one that
follows incrementally, forgets the server.
"""

from __future__ import annotations

from coordinator.catalog import Catalog, OpResult, ServerState
from coordinator.ops.common import check_request_id, header
from rpc.errors import IllegalState, NotFound
from rpc.protocols import coordinator_pb2 as pb

KIND = "remove_server"


def decide(catalog: Catalog, request: pb.RemoveServerRequest, op_id: int) -> pb.LogRecord:
    check_request_id(request.request_id)
    server = catalog.servers.get(request.server_uuid)
    if server is None:
        raise NotFound(f"no tablet server {request.server_uuid!r}")
    if server.state is not ServerState.DOWN:
        raise IllegalState(f"tablet server {server.uuid} is {server.state.value}, not DOWN")
    record = pb.LogRecord()
    rs = record.remove_server
    rs.header.CopyFrom(header(op_id, request.request_id, pb.DONE))
    rs.server_uuid = server.uuid
    rs.previous_record_id = server.record_id
    rs.retire_record_id = catalog.retirements.get(server.uuid, (False, 0))[1]
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    rs = record.remove_server
    return tuple(i for i in (rs.previous_record_id, rs.retire_record_id) if i)


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    rs = record.remove_server
    catalog.servers.pop(rs.server_uuid, None)
    catalog.retirements.pop(rs.server_uuid, None)
    catalog.heartbeats.pop(rs.server_uuid, None)
    catalog.record_session(rs.header.request_id, OpResult(rs.header.op_id, KIND, True))


def response(result: OpResult) -> pb.RemoveServerResponse:
    return pb.RemoveServerResponse()
