"""ServerDown: the leader marks a tablet server down after `tserver_timeout` of silence.

Single phase (DONE at the commit point): nothing is sent to the silent server. Its replicas
stay in the tablets' configurations and are left to the re-replication policy; operations
in progress skip it. The record invalidates the server's EnlistServer record.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.catalog import Catalog, ServerInfo, ServerState
from coordinator.ops.common import header
from rpc.errors import NotFound
from rpc.protocols import coordinator_pb2 as pb

KIND = "server_down"


@dataclass(frozen=True, slots=True)
class ServerDownRequest:
    server_uuid: str
    reason: str


def decide(catalog: Catalog, request: ServerDownRequest, op_id: int) -> pb.LogRecord | None:
    server = catalog.servers.get(request.server_uuid)
    if server is None:
        raise NotFound(f"no tablet server {request.server_uuid!r}")
    if server.state is ServerState.DOWN:
        return None
    record = pb.LogRecord()
    sd = record.server_down
    sd.header.CopyFrom(header(op_id, None, pb.DONE))
    sd.server_uuid = server.uuid
    sd.address = server.address
    sd.previous_record_id = server.record_id
    sd.reason = request.reason
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    previous = record.server_down.previous_record_id
    return (previous,) if previous else ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    sd = record.server_down
    catalog.servers[sd.server_uuid] = ServerInfo(
        sd.server_uuid, sd.address, ServerState.DOWN, entry_id
    )


def response(result) -> None:
    return None
