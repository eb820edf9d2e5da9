"""What every operation module shares: request validation, the tablet-server gateway
interface, the completion context and the replica-call loop of `complete`.

An operation module has `KIND` (its LogRecord oneof name), `decide(catalog, request, op_id)
-> LogRecord` (pure, raises rpc.errors for bad input and logs nothing), `apply(catalog,
entry_id, record)` (pure change of the catalog, every node, log order) and `complete(ctx,
record)` (leader only: idempotent tablet-server calls, then the DONE record).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from coordinator.catalog import (
    CLIENT_ID_BYTES_MAX,
    COLUMN_NAME_BYTES_MAX,
    COLUMNS_MAX,
    SUPERSEDED_REQUESTS_MAX,
    TABLE_NAME_BYTES_MAX,
    Catalog,
    OpResult,
    ServerInfo,
    ServerState,
    TableInfo,
    TableState,
)
from rpc import schema_rules
from rpc.errors import (
    AlreadyInProgress,
    BadRequest,
    NoSpace,
    NotFound,
    RpcError,
    TabletDeleted,
    TimedOut,
    Unavailable,
)
from rpc.protocols import coordinator_pb2 as pb
from rpc.schema_rules import column_name_problem

logger = logging.getLogger(__name__)

CALL_ATTEMPTS_MAX = 3
CALL_BACKOFF_S = 0.05
# A factor above the live servers, while some are down: the client's retry hint.
FACTOR_RETRY_AFTER_MS = 500
DOWN_NAMED_MAX = 8  # servers named in a refusal


class TabletServerGateway(Protocol):
    """Idempotent calls to tablet servers. Each succeeds when the effect is already there
    (tablet already created with that id, already deleted or absent, schema already at the
    target version); it raises Unavailable/TimedOut when the server cannot be reached and
    another rpc error when the server refuses."""

    def create_tablet(
        self,
        server: ServerInfo,
        table_id: str,
        table_name: str,
        tablet: pb.TabletPlacement,
        schema: pb.Schema,
        peers: Sequence[ServerInfo],
        timeout_s: float,
    ) -> None: ...

    def delete_tablet(self, server: ServerInfo, tablet_id: str, timeout_s: float) -> None: ...

    def alter_schema(
        self,
        server: ServerInfo,
        tablet_id: str,
        old_schema: pb.Schema,
        new_schema: pb.Schema,
        timeout_s: float,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class CompletionContext:
    """What `complete` may use. `commit(record, invalidates)` is the leader's safe append
    followed by apply (under the write lock); `crash(name)` is the crash-point hook; `timed`
    records how long a step took (the leader's step metrics)."""

    catalog: Catalog
    gateway: TabletServerGateway
    commit: Callable[[pb.LogRecord, Sequence[int]], int]
    crash: Callable[[str], None]
    call_timeout_s: float = 5.0
    attempts_max: int = CALL_ATTEMPTS_MAX
    sleep: Callable[[float], None] = time.sleep
    # timed(step, seconds): a step of the completion (coordinator.engine.STEPS), for metrics.
    timed: Callable[[str, float], None] = lambda step, seconds: None


# ---------------------------------------------------------------- validation


def check_request_id(request_id: pb.RequestId) -> None:
    if not request_id.client_id or request_id.seq == 0:
        raise BadRequest("request_id with a client id and a sequence number > 0 is required")
    if len(request_id.client_id.encode()) > CLIENT_ID_BYTES_MAX:
        raise BadRequest(f"client id over {CLIENT_ID_BYTES_MAX} bytes")


def check_name(name: str, what: str = "table name") -> None:
    if not name:
        raise BadRequest(f"{what} must not be empty")
    if len(name.encode()) > TABLE_NAME_BYTES_MAX:
        raise BadRequest(f"{what} is {len(name.encode())} bytes, over {TABLE_NAME_BYTES_MAX}")
    if not name.isprintable():
        raise BadRequest(f"{what} must be printable")


def check_new_name(name: str, what: str = "table name") -> None:
    """A name a table is given (create, rename): also without leading or trailing white
    space, which listings do not show (" t1" would pass for "t1")."""
    check_name(name, what)
    if name != name.strip():
        raise BadRequest(f"{what} {name!r} starts or ends with white space")


def check_column(column: pb.ColumnSchema) -> None:
    if not column.name:
        raise BadRequest("a column has no name")
    if len(column.name.encode()) > COLUMN_NAME_BYTES_MAX:
        raise BadRequest(f"column name over {COLUMN_NAME_BYTES_MAX} bytes")
    if (problem := column_name_problem(column.name)) is not None:
        raise BadRequest(problem)
    if column.type == pb.TYPE_UNKNOWN or column.type not in pb.ColumnType.values():
        raise BadRequest(f"column {column.name!r} has no valid type")


def check_schema(schema: pb.Schema) -> None:
    columns = list(schema.columns)
    if not columns:
        raise BadRequest("the schema has no columns")
    if len(columns) > COLUMNS_MAX:
        raise BadRequest(f"{len(columns)} columns, over {COLUMNS_MAX}")
    seen: set[str] = set()
    key_done = False
    for column in columns:
        check_column(column)
        if column.name in seen:
            raise BadRequest(f"column {column.name!r} appears twice")
        seen.add(column.name)
        if column.is_key:
            if key_done:
                raise BadRequest(f"key column {column.name!r} after a non-key column")
            if column.nullable:
                raise BadRequest(f"key column {column.name!r} must not be nullable")
            if column.type == schema_rules.DOUBLE:
                raise BadRequest(f"key column {column.name!r} cannot be a double")
        else:
            key_done = True
    if not columns[0].is_key:
        raise BadRequest("the schema has no key column")


def check_factor_placeable(catalog: Catalog, rf: int, what: str = "replication factor") -> None:
    """Refuse a factor that the tablet servers not retired cannot hold now.

    Above the servers registered and not retired (DOWN ones counted), it can never be met
    until an operator adds a server or cancels a retirement: BAD_REQUEST. Within them but
    above the live ones, some servers are down for now (a restart, all of them killed): a
    transient condition, so UNAVAILABLE with a retry hint, which clients retry within their
    deadline (nothing is logged, so a retry with the same request id decides afresh)."""
    retired = catalog.retired_servers()
    known = [s for s in catalog.servers.values() if s.uuid not in retired]
    live = [s for s in known if s.state is ServerState.LIVE]
    if rf <= len(live):
        return
    if rf > len(known):
        raise BadRequest(
            f"{what} {rf} above the {len(live)} live tablet servers not retired "
            f"({len(known)} registered): add tablet servers or give a lower factor"
        )
    down = sorted(s.uuid for s in known if s.state is not ServerState.LIVE)
    shown = ", ".join(down[:DOWN_NAMED_MAX]) + (", ..." if len(down) > DOWN_NAMED_MAX else "")
    raise Unavailable(
        f"{what} {rf} above the {len(live)} live tablet servers not retired ({shown} DOWN): "
        "wait until they are back (remove-tserver one gone for good), or give a lower factor",
        retry_after_ms=FACTOR_RETRY_AFTER_MS,
    )


def table_for_change(catalog: Catalog, name: str) -> TableInfo:
    """The table a DropTable/AlterTable names; it must exist and have no operation pending."""
    check_name(name)
    table = catalog.table_by_name(name)
    if table is None:
        raise NotFound(f"no table named {name!r}")
    if table.pending_op_id or table.state is not TableState.RUNNING:
        raise AlreadyInProgress(
            f"table {name!r} is {table.state.value} (operation {table.pending_op_id})",
            retry_after_ms=100,
        )
    return table


def header(op_id: int, request_id: pb.RequestId | None, phase: int) -> pb.OpHeader:
    h = pb.OpHeader(op_id=op_id, phase=phase)
    if request_id is not None:
        h.request_id.CopyFrom(request_id)
    return h


def placements(catalog: Catalog, table: TableInfo) -> list[pb.TabletPlacement]:
    out = []
    for tablet_id in table.tablet_ids:
        t = catalog.tablets[tablet_id]
        out.append(
            pb.TabletPlacement(
                tablet_id=t.tablet_id,
                partition=pb.Partition(hash_bucket=t.hash_bucket, num_buckets=t.num_buckets),
                replica_uuids=list(catalog.current_replicas(t.tablet_id)),
            )
        )
    return out


def superseded(
    requests: Sequence[tuple[str, int, int]], table_id: str
) -> list[pb.SupersededRequest]:
    """Results of a table's requests, carried by the record that invalidates their records."""
    return [
        pb.SupersededRequest(
            request_id=pb.RequestId(client_id=c, seq=s), table_id=table_id, schema_version=v
        )
        for c, s, v in list(requests)[-SUPERSEDED_REQUESTS_MAX:]
    ]


def record_superseded(catalog: Catalog, carried: Sequence[pb.SupersededRequest]) -> None:
    """Results carried by a record for the requests of records it invalidated."""
    for s in carried:
        catalog.record_session(
            s.request_id, OpResult(0, "", True, s.table_id, schema_version=s.schema_version)
        )


def table_requests(
    table: TableInfo, carried: Sequence[pb.SupersededRequest], mine: tuple[str, int, int] | None
) -> tuple[tuple[str, int, int], ...]:
    """The table's requests after a record that carries `carried` and answers `mine` (a node
    replaying the live log never saw the records the carried ones came from)."""
    requests = list(table.requests)
    known = {(c, s) for c, s, _ in requests}
    more = [(s.request_id.client_id, s.request_id.seq, s.schema_version) for s in carried]
    for r in [*more, *([mine] if mine else [])]:
        if r[:2] not in known:
            known.add(r[:2])
            requests.append(r)
    return tuple(requests[-SUPERSEDED_REQUESTS_MAX:])


# ---------------------------------------------------------------- completion


def call_replica(
    ctx: CompletionContext,
    point: str,
    server_uuid: str,
    tablet_id: str,
    call: Callable[[ServerInfo], None],
) -> bool:
    """One idempotent call to one replica, between crash points `<point>` (before/after).

    Returns False when the replica was skipped: its server is down or gone, so it is left to
    the re-replication policy (seed 003: never wait on a server that is gone), or it
    refused the call for good (TABLET_DELETED, BAD_REQUEST). Raises
    Unavailable when a live server cannot be reached after the bounded attempts; the
    operation then stays pending and the leader rolls it forward later.
    """
    last_error: RpcError | None = None
    for attempt in range(ctx.attempts_max):
        with ctx.catalog.lock:
            server = ctx.catalog.servers.get(server_uuid)
        if server is None or server.state is not ServerState.LIVE:
            logger.info("skipping %s on %s: server down or gone", tablet_id, server_uuid)
            return False
        ctx.crash(f"{point.replace('{}', 'before')}")
        try:
            call(server)
        except (Unavailable, TimedOut) as e:
            last_error = e
            ctx.sleep(CALL_BACKOFF_S * (2**attempt))
            continue
        except TabletDeleted as e:
            # Tombstoned for good (tablet ids are never reused): nothing more will ever
            # happen on this replica, so retrying would keep the operation, and a new
            # leader's recovery, pending forever. Skip it like a replica on a dead server.
            logger.info("skipping %s on %s: %s", tablet_id, server_uuid, e)
            return False
        except NoSpace as e:
            # Full (its disk at the reserve, or its tablet limit): a retry would find it as
            # full. Skipped and recorded; the policy places a replica elsewhere.
            logger.warning("skipping %s on %s: %s", tablet_id, server_uuid, e)
            return False
        except BadRequest as e:
            # Refused for good by a live server (validation shared with the servers,
            # rpc/schema_rules.py, keeps this from happening; a server of other rules
            # could still): retrying would hold the operation, and with it every new
            # leader's recovery, for ever. Skipped and recorded like a replica on a dead
            # server, loudly: the operator sees it here and in the DONE record.
            logger.error("skipping %s on %s: refused: %s", tablet_id, server_uuid, e)
            return False
        ctx.crash(f"{point.replace('{}', 'after')}")
        return True
    raise Unavailable(
        f"tablet server {server_uuid} unreachable for {tablet_id}: {last_error}",
        retry_after_ms=500,
    )
