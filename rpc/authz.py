"""The role table: which roles may call each rpc method of every service (design/security.md
section 3). Pure: no rpc, no catalog, no clocks. Here in `rpc` so that every server package
(the coordinator, the tablet servers) checks calls against the same table without
importing another's code (design/architecture.md); `coordinator/authz.py` re-exports it.

Roles: `admin` (DDL, membership, replication admin, principals), `writer` (write and scan
rows), `reader` (scan rows, read schemas and locations), `server` (the cluster's own
processes: heartbeats, tablet Raft, tablet copy, the coordinator's calls to tablet servers).
`admin` implies `writer`, which implies `reader`; `server` is apart: a user's key never
passes for a server's, nor a server's for a user's. `join` (a join token's key,
design/security.md section 5) may call Coordinator.JoinServer alone, implies nothing and is
implied by nothing.

Every method registered by any service has an entry (tests/coordinator/test_authz.py builds
each service's real registrations and checks it), so a new method cannot be forgotten: a
method without one is refused (`authorize` answers a reason), never let through.
"""

from __future__ import annotations

from collections.abc import Iterable

ADMIN = "admin"
WRITER = "writer"
READER = "reader"
SERVER = "server"
JOIN = "join"
ROLES = (ADMIN, WRITER, READER, SERVER, JOIN)
# A role and the roles it implies.
IMPLIES: dict[str, frozenset[str]] = {
    ADMIN: frozenset({ADMIN, WRITER, READER}),
    WRITER: frozenset({WRITER, READER}),
    READER: frozenset({READER}),
    SERVER: frozenset({SERVER}),
    JOIN: frozenset({JOIN}),
}

_ANY = (READER, SERVER)  # every principal: readers (and so writers, admins) and servers
_READ = (READER, SERVER)
_ADMIN = (ADMIN,)
_SERVER = (SERVER,)

# method -> the roles that may call it (a caller needs one of them, after IMPLIES).
METHOD_ROLES: dict[str, tuple[str, ...]] = {
    # every server: liveness
    "rpc.Ping": _ANY,
    # ---- Coordinator: DDL, membership, replication admin, principals
    "Coordinator.CreateTable": _ADMIN,
    "Coordinator.DropTable": _ADMIN,
    "Coordinator.AlterTable": _ADMIN,
    "Coordinator.SetReplication": _ADMIN,
    "Coordinator.MoveReplica": _ADMIN,
    "Coordinator.RetireServer": _ADMIN,
    "Coordinator.RemoveServer": _ADMIN,
    "Coordinator.AddNode": _ADMIN,
    "Coordinator.RemoveNode": _ADMIN,
    "Coordinator.AddPrincipal": _ADMIN,
    "Coordinator.RevokePrincipal": _ADMIN,
    "Coordinator.SetPrincipalRoles": _ADMIN,
    "Coordinator.ListPrincipals": _ADMIN,
    "Coordinator.ReplicationStatus": _ADMIN,
    # ---- Coordinator: reads clients need
    "Coordinator.ListTables": _READ,
    "Coordinator.DescribeTable": _READ,
    "Coordinator.GetTabletLocations": _READ,
    "Coordinator.ListServers": _READ,
    "Coordinator.GetLeader": _ANY,
    "Coordinator.Status": _ANY,
    # ---- Coordinator: the tablet servers' own calls
    "Coordinator.Heartbeat": _SERVER,
    "Coordinator.EnlistServer": _SERVER,
    # ---- Coordinator: a tablet server admitting itself with a join token's key
    "Coordinator.JoinServer": (JOIN,),
    # ---- LogStore (a coordinator node's read-only log service, or `logstore serve`)
    "LogStore.Read": (ADMIN, SERVER),  # `coordinator log` (admin), RemoteLogStore (server)
    "LogStore.LastId": (ADMIN, SERVER),
    "LogStore.Status": (ADMIN, SERVER),
    "LogStore.Append": _SERVER,  # the lease holder's appends
    "LogStore.Barrier": _SERVER,
    "LogStore.AddMember": _ADMIN,
    "LogStore.RemoveMember": _ADMIN,
    "LogStore.TransferLeadership": _ADMIN,
    # ---- TServer: rows
    "TServer.Write": (WRITER,),
    "TServer.Scan": _READ,
    "TServer.GetSchema": _READ,
    "TServer.ListTablets": (ADMIN, SERVER),
    "TServer.Status": _ANY,
    # ---- TServer: the coordinator's calls
    "TServer.CreateTablet": _SERVER,
    "TServer.DeleteTablet": _SERVER,
    "TServer.AlterSchema": _SERVER,
    "TServer.ChangeConfig": _SERVER,
    # ---- TServer: consensus and tablet copy between tablet servers
    "TServer.Consensus": _SERVER,
    "TServer.StartTabletCopy": _SERVER,
    "TServer.BeginCopySession": _SERVER,
    "TServer.FetchCopyChunk": _SERVER,
    "TServer.EndCopySession": _SERVER,
    "TServer.CancelTabletCopy": (ADMIN, SERVER),  # `tserver copies --cancel`
}


def expand(roles: Iterable[str]) -> frozenset[str]:
    """The roles held, with the roles they imply."""
    out: set[str] = set()
    for role in roles:
        out |= IMPLIES.get(role, frozenset())
    return frozenset(out)


def needed(method: str) -> tuple[str, ...] | None:
    """The roles that may call `method`; None when it has no entry."""
    return METHOD_ROLES.get(method)


def authorize(method: str, roles: Iterable[str]) -> str | None:
    """None when a caller holding `roles` may call `method`, else why not (naming the role
    it needs)."""
    allowed = METHOD_ROLES.get(method)
    held = sorted(set(roles))
    if allowed is None:
        return f"{method} has no entry in the role table: refused"
    if expand(held) & set(allowed):
        return None
    need = f"the {allowed[0]} role" if len(allowed) == 1 else "a role of " + ", ".join(allowed)
    has = ", ".join(held) if held else "no role"
    return f"{method} needs {need}; the caller has {has}"
