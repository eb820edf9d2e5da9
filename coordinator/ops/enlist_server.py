"""EnlistServer: a tablet server joins (or rejoins after being marked down).

Single phase: the record is logged DONE at the commit point (there is nothing to do on
tablet servers). It invalidates the server's previous EnlistServer/ServerDown record, so the
live log holds one record per server. Enlisting a server that is live at the same address
is a no-op (decide returns None and nothing is logged): tablet servers may enlist again at
will.
"""

from __future__ import annotations

from coordinator.catalog import (
    ADDRESS_BYTES_MAX,
    SERVER_UUID_BYTES_MAX,
    Catalog,
    ServerInfo,
    ServerState,
)
from coordinator.ops.common import header
from rpc.errors import BadRequest
from rpc.protocols import coordinator_pb2 as pb

KIND = "enlist_server"


def decide(catalog: Catalog, request: pb.EnlistServerRequest, op_id: int) -> pb.LogRecord | None:
    uuid, address = request.server_uuid, request.address
    if not uuid or len(uuid.encode()) > SERVER_UUID_BYTES_MAX:
        raise BadRequest(f"server uuid must be 1..{SERVER_UUID_BYTES_MAX} bytes")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or len(address.encode()) > ADDRESS_BYTES_MAX:
        raise BadRequest(f"server address must be HOST:PORT, got {address!r}")
    existing = catalog.servers.get(uuid)
    if existing is not None and existing.state is ServerState.LIVE and existing.address == address:
        return None
    record = pb.LogRecord()
    es = record.enlist_server
    es.header.CopyFrom(header(op_id, None, pb.DONE))
    es.server_uuid = uuid
    es.address = address
    es.previous_record_id = existing.record_id if existing is not None else 0
    return record


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    previous = record.enlist_server.previous_record_id
    return (previous,) if previous else ()


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    es = record.enlist_server
    catalog.servers[es.server_uuid] = ServerInfo(
        es.server_uuid, es.address, ServerState.LIVE, entry_id
    )


def response(result) -> pb.EnlistServerResponse:
    return pb.EnlistServerResponse()
