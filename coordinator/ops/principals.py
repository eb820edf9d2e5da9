"""Principals: who may call what (design/security.md section 3), as state of the log.

A principal is a user, tablet server or coordinator node: a name, its kind, its CURVE public
key (Z85 text, 40 characters), its roles (admin, writer, reader, server) and its state
(active, revoked). Three requests change one principal, each logged as one Principal record
holding the principal's whole new state: AddPrincipal, RevokePrincipal, SetPrincipalRoles.

Two phases. Commit point: the STARTED record with the decision. `complete` appends DONE,
which invalidates STARTED and the principal's previous record, so the live log holds one
record per principal. While STARTED, the more restrictive of the old and the new state is
in force: an added principal is not active yet, a revocation is in force at once, and of new
roles only those the principal had before count. Nothing is called between the phases
today; the step is where the leader will push the new principals table to the tablet
servers (design/security.md section 4) before it calls the change done. A node that takes
over with a STARTED record rolls it forward like any pending operation.

Rules (decide): names are 1..128 bytes of letters, digits and `._@:+-`; a key belongs to one
principal that is not revoked; users take admin, writer or reader, tablet servers and
coordinator nodes the server role alone; the last active admin can be neither revoked nor
lose the role; one operation at a time per principal (ALREADY_IN_PROGRESS while one is
pending). Adding a name that is revoked replaces it; revoking a revoked principal or setting
the roles it has logs nothing. Every request carries a request id: a retry gets the first
answer (the principal's name), also after later records invalidated its record (they carry
its id, `superseded`).
"""

from __future__ import annotations

import re

from coordinator.catalog import SUPERSEDED_REQUESTS_MAX, Catalog, OpResult, PendingOp, PrincipalInfo
from coordinator.ops.common import CompletionContext, check_request_id, header
from rpc import keys
from rpc.errors import AlreadyExists, AlreadyInProgress, BadRequest, IllegalState, NotFound
from rpc.protocols import coordinator_pb2 as pb

KIND = "principal"

KINDS = ("user", "tserver", "coordinator")
ROLES = ("admin", "writer", "reader", "server")
USER_ROLES = frozenset({"admin", "writer", "reader"})
ACTIVE = "active"
REVOKED = "revoked"
NAME_BYTES_MAX = 128
PRINCIPALS_MAX = 10_000
KEY_CHARS = 40  # Z85 of a 32-byte CURVE key
_NAME = re.compile(r"[A-Za-z0-9._@:+-]+")
_Z85 = frozenset(
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
)


# ---------------------------------------------------------------- validation


def key_problem(key: str) -> str | None:
    """Why `key` is not a CURVE public key in Z85 text, or None."""
    if len(key) != KEY_CHARS:
        return f"a public key is {KEY_CHARS} characters of Z85 text, got {len(key)}"
    bad = sorted(set(key) - _Z85)
    if bad:
        return f"the public key has characters outside Z85: {''.join(bad)!r}"
    # Decoded, not just looked at: "#" * 40 overflows, "0" * 40 is the all-zero key.
    problem = keys.key_problem(key)
    return None if problem is None else f"the public key is unusable: {problem}"


def check_principal_name(name: str) -> None:
    if not name:
        raise BadRequest("a principal needs a name")
    if len(name.encode()) > NAME_BYTES_MAX:
        raise BadRequest(f"principal name is {len(name.encode())} bytes, over {NAME_BYTES_MAX}")
    if not _NAME.fullmatch(name):
        raise BadRequest(f"principal name {name!r}: letters, digits and . _ @ : + - only")


def check_roles(kind: str, roles: list[str]) -> tuple[str, ...]:
    """The roles in their canonical order (ROLES); refuses unknown ones and a role the
    principal's kind may not hold."""
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        raise BadRequest(f"unknown role {unknown[0]!r}; roles: {', '.join(ROLES)}")
    if not roles:
        raise BadRequest(f"a principal needs at least one role: {', '.join(ROLES)}")
    chosen = tuple(r for r in ROLES if r in roles)
    if kind == "user" and "server" in chosen:
        raise BadRequest("the server role is for tablet servers and coordinator nodes, not users")
    if kind != "user" and chosen != ("server",):
        raise BadRequest(f"a {kind} principal holds the server role alone")
    return chosen


def _existing(catalog: Catalog, name: str) -> PrincipalInfo:
    check_principal_name(name)
    p = catalog.principals.get(name)
    if p is None:
        raise NotFound(f"no principal named {name!r}")
    if p.pending_op_id:
        raise AlreadyInProgress(
            f"principal {name!r} is being changed (operation {p.pending_op_id})",
            retry_after_ms=100,
        )
    return p


def _other_admins(catalog: Catalog, name: str) -> int:
    return sum(
        1
        for p in catalog.principals.values()
        if p.name != name and p.state == ACTIVE and "admin" in p.roles
    )


def _check_not_last_admin(catalog: Catalog, p: PrincipalInfo, what: str) -> None:
    if p.state == ACTIVE and "admin" in p.roles and _other_admins(catalog, p.name) == 0:
        raise IllegalState(
            f"{what} {p.name!r} would leave the cluster without an active admin: "
            "add another admin first"
        )


# ---------------------------------------------------------------- decide


def _record(op_id: int, request, action: str, p: PrincipalInfo | None) -> pb.LogRecord:
    record = pb.LogRecord()
    r = record.principal
    r.header.CopyFrom(header(op_id, request.request_id, pb.STARTED))
    r.action = action
    r.name = request.name
    if p is not None:
        r.kind = p.kind
        r.public_key = p.public_key
        r.roles.extend(p.roles)
        r.state = p.state
        r.previous_record_id = p.record_id
        r.old_roles.extend(p.roles)
        r.old_state = p.state
        for client_id, seq in p.requests[-SUPERSEDED_REQUESTS_MAX:]:
            r.superseded.add(client_id=client_id, seq=seq)
    return record


def decide(catalog: Catalog, request, op_id: int) -> pb.LogRecord | None:
    check_request_id(request.request_id)
    if isinstance(request, pb.AddPrincipalRequest):
        return _decide_add(catalog, request, op_id)
    if isinstance(request, pb.RevokePrincipalRequest):
        p = _existing(catalog, request.name)
        if p.state == REVOKED:
            return None
        _check_not_last_admin(catalog, p, "revoking")
        record = _record(op_id, request, "revoke", p)
        record.principal.state = REVOKED
        return record
    if isinstance(request, pb.SetPrincipalRolesRequest):
        p = _existing(catalog, request.name)
        roles = check_roles(p.kind, list(request.roles))
        if roles == p.roles:
            return None
        if p.state == REVOKED:
            raise IllegalState(f"principal {p.name!r} is revoked: add it again instead")
        if "admin" not in roles:
            _check_not_last_admin(catalog, p, "taking the admin role from")
        record = _record(op_id, request, "set_roles", p)
        del record.principal.roles[:]
        record.principal.roles.extend(roles)
        return record
    raise AssertionError(f"not a principal request: {type(request).__name__}")


def _decide_add(catalog: Catalog, request: pb.AddPrincipalRequest, op_id: int) -> pb.LogRecord:
    check_principal_name(request.name)
    kind = request.kind or "user"
    if kind not in KINDS:
        raise BadRequest(f"unknown principal kind {kind!r}; kinds: {', '.join(KINDS)}")
    roles = check_roles(kind, list(request.roles))
    if (problem := key_problem(request.public_key)) is not None:
        raise BadRequest(problem)
    old = catalog.principals.get(request.name)
    if old is not None and (old.state != REVOKED or old.pending_op_id):
        raise AlreadyExists(f"a principal named {request.name!r} exists ({old.state})")
    holder = catalog.principal_keys.get(request.public_key)
    if holder is not None:
        raise AlreadyExists(f"that public key belongs to principal {holder!r}")
    if old is None and len(catalog.principals) >= PRINCIPALS_MAX:
        raise IllegalState(f"{PRINCIPALS_MAX} principals: revoke and reuse names")
    record = _record(op_id, request, "add", None)
    r = record.principal
    r.kind = kind
    r.public_key = request.public_key
    r.roles.extend(roles)
    r.state = ACTIVE
    if old is not None:  # a revoked principal of that name: replaced
        r.previous_record_id = old.record_id
        for client_id, seq in old.requests[-SUPERSEDED_REQUESTS_MAX:]:
            r.superseded.add(client_id=client_id, seq=seq)
    return record


# ---------------------------------------------------------------- apply (every node, log order)


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    return ()


def in_force(r: pb.Principal, done: bool) -> tuple[tuple[str, ...], bool]:
    """The roles and activity in force after record `r` (the more restrictive of old and
    new while the operation is pending)."""
    roles = tuple(r.roles)
    active = r.state == ACTIVE
    if done:
        return roles, active
    old = set(r.old_roles)
    return tuple(x for x in roles if x in old), active and r.old_state == ACTIVE


def apply(catalog: Catalog, entry_id: int, record: pb.LogRecord) -> None:
    r = record.principal
    op_id = r.header.op_id
    done = r.header.phase == pb.DONE
    rid = r.header.request_id
    for s in r.superseded:
        catalog.record_session(s, OpResult(0, KIND, True, principal=r.name))
    old = catalog.principals.get(r.name)
    if old is not None and catalog.principal_keys.get(old.public_key) == r.name:
        del catalog.principal_keys[old.public_key]
    requests = [(s.client_id, s.seq) for s in r.superseded]
    if old is not None:
        requests += [q for q in old.requests if q not in requests]
    if rid.seq and (rid.client_id, rid.seq) not in requests:
        requests.append((rid.client_id, rid.seq))
    roles, active = in_force(r, done)
    catalog.principals[r.name] = PrincipalInfo(
        name=r.name,
        kind=r.kind,
        public_key=r.public_key,
        roles=tuple(r.roles),
        state=r.state,
        record_id=entry_id,
        pending_op_id=0 if done else op_id,
        in_force_roles=roles,
        in_force_active=active,
        requests=tuple(requests[-SUPERSEDED_REQUESTS_MAX:]),
    )
    if r.state != REVOKED:
        catalog.principal_keys[r.public_key] = r.name
    if done:
        catalog.pending.pop(op_id, None)
    else:
        catalog.pending[op_id] = PendingOp(op_id, KIND, record)
    catalog.record_session(rid, OpResult(op_id, KIND, done, principal=r.name))


def complete(ctx: CompletionContext, record: pb.LogRecord) -> pb.LogRecord:
    r = record.principal
    assert r.header.phase == pb.STARTED
    done = pb.LogRecord()
    done.CopyFrom(record)
    done.principal.header.phase = pb.DONE
    invalidates = [r.header.op_id]
    if r.previous_record_id:
        invalidates.append(r.previous_record_id)
    ctx.crash(f"{KIND}.before_done")
    ctx.commit(done, invalidates)
    ctx.crash(f"{KIND}.after_done")
    return done


def response(result: OpResult | None):
    """One answer type for the three requests (the node makes the method's own type)."""
    return pb.AddPrincipalResponse(name=result.principal if result else "")


# ---------------------------------------------------------------- reads


def summaries(catalog: Catalog) -> pb.ListPrincipalsResponse:
    """Every principal, by name (caller checks the node serves)."""
    with catalog.lock:
        out = pb.ListPrincipalsResponse()
        for name in sorted(catalog.principals):
            p = catalog.principals[name]
            out.principals.add(
                name=p.name,
                kind=p.kind,
                public_key=p.public_key,
                roles=list(p.roles),
                state=p.state,
                pending=bool(p.pending_op_id),
                record_id=p.record_id,
            )
        return out


def roles_of_key(catalog: Catalog, public_key: str) -> tuple[str, ...] | None:
    """The roles in force for the principal holding `public_key`; None when no active
    principal holds it (unknown, revoked, or added but not done yet)."""
    with catalog.lock:
        name = catalog.principal_keys.get(public_key)
        p = catalog.principals.get(name) if name is not None else None
        if p is None or not p.in_force_active:
            return None
        return p.in_force_roles
