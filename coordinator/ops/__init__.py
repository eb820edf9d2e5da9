"""Coordinator operations, one module each (architecture 4.3).

Each module has KIND (its LogRecord oneof name), `decide(catalog, request, op_id)` (pure,
under the catalog lock; raises rpc.errors for bad input and logs nothing; returns None when
there is nothing to log), `invalidates_at_commit(record)`, `apply(catalog, entry_id,
record)` (pure, every node, log order), `response(result)` and, for two-phase operations,
`complete(ctx, record)` (leader only). `apply_record` dispatches a decoded record.
"""

from __future__ import annotations

from types import ModuleType

from coordinator.catalog import Catalog
from coordinator.ops import (
    alter_table,
    create_table,
    drop_table,
    enlist_server,
    principals,
    remove_server,
    retire_server,
    server_down,
    set_replication,
)
from rpc.protocols import coordinator_pb2 as pb

OPS: dict[str, ModuleType] = {
    m.KIND: m
    for m in (
        create_table,
        drop_table,
        alter_table,
        enlist_server,
        server_down,
        remove_server,
        set_replication,
        retire_server,
        principals,
    )
}
# Operations whose STARTED record is followed by side effects and a DONE record.
TWO_PHASE = frozenset({create_table.KIND, drop_table.KIND, alter_table.KIND, principals.KIND})


def decode(data: bytes) -> pb.LogRecord:
    record = pb.LogRecord()
    record.ParseFromString(data)
    return record


def apply_record(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    """Apply one log record to the catalog (caller holds the lock and orders the calls)."""
    kind = record.WhichOneof("record")
    if kind == "lease":
        catalog.last_lease = (entry_id, record.lease)
    elif kind in OPS:
        OPS[kind].apply(catalog, entry_id, record)
    else:
        raise AssertionError(f"log record #{entry_id} of unknown kind {kind!r}")
    catalog.applied_id = max(catalog.applied_id, entry_id)


def op_header(record: pb.LogRecord) -> pb.OpHeader | None:
    kind = record.WhichOneof("record")
    if kind in OPS:
        return getattr(record, kind).header
    return None
