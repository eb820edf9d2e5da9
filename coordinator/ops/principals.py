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

Join tokens (design/security.md section 5): a `join-token` principal holds the public half of
a one-use secret, the `join` role alone (which may call only Coordinator.JoinServer) and a
deadline (`expires_unix_ms`, the leader's wall clock at decide plus the TTL). JoinServer is
logged by this operation too, as one `join` record: its commit point invalidates the token's
record (the token is spent, in force at once) and adds the tablet-server principal (in force
at DONE), so the token admits one server, once. The leader passes its clock in the request
(`JoinServer.now_unix_ms`), so decide stays pure.
"""

from __future__ import annotations

import datetime
import hashlib
import re
from dataclasses import dataclass

from coordinator.catalog import SUPERSEDED_REQUESTS_MAX, Catalog, OpResult, PendingOp, PrincipalInfo
from coordinator.ops.common import CompletionContext, check_request_id, header
from rpc import keys
from rpc.errors import (
    AlreadyExists,
    AlreadyInProgress,
    BadRequest,
    IllegalState,
    NotFound,
    PermissionDenied,
)
from rpc.protocols import coordinator_pb2 as pb

KIND = "principal"

KINDS = ("user", "tserver", "coordinator", "join-token")
ROLES = ("admin", "writer", "reader", "server", "join")
JOIN_TOKEN_KIND = "join-token"
JOIN_ROLE = "join"
TSERVER_KIND = "tserver"
JOIN_TOKEN_PREFIX = "join-"
# A token is for the next few servers an admin starts, not a standing credential.
JOIN_TOKEN_TTL_S_DEFAULT = 3600
JOIN_TOKEN_TTL_S_MAX = 7 * 24 * 3600
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
    if kind == JOIN_TOKEN_KIND:
        if chosen != (JOIN_ROLE,):
            raise BadRequest("a join-token principal holds the join role alone")
        return chosen
    if JOIN_ROLE in chosen:
        raise BadRequest("the join role is for join tokens alone (coordinator join-token)")
    if kind == "user" and "server" in chosen:
        raise BadRequest("the server role is for tablet servers and coordinator nodes, not users")
    if kind != "user" and chosen != ("server",):
        raise BadRequest(f"a {kind} principal holds the server role alone")
    return chosen


def join_token_name(public_key: str) -> str:
    """A join token's principal name: derived from its public key, so the tool that made
    the token knows it without an answer and `users revoke` can name it."""
    return JOIN_TOKEN_PREFIX + hashlib.blake2b(public_key.encode(), digest_size=6).hexdigest()


@dataclass(frozen=True, slots=True)
class AddJoinToken:
    """AddPrincipal of a join token (kind join-token, `ttl_s`) as the leader decides it:
    with its wall clock, from which the deadline is counted."""

    request: pb.AddPrincipalRequest
    now_unix_ms: int

    @property
    def request_id(self) -> pb.RequestId:
        return self.request.request_id


@dataclass(frozen=True, slots=True)
class JoinServer:
    """Coordinator.JoinServer as the leader decides it: the request's fields, the key the
    caller's CURVE handshake proved (the token's), and the leader's wall clock."""

    request_id: pb.RequestId
    server_uuid: str
    public_key: str
    token_key: str
    now_unix_ms: int


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
        r.expires_unix_ms = p.expires_unix_ms
        r.join_token = p.join_token
        for client_id, seq in p.requests[-SUPERSEDED_REQUESTS_MAX:]:
            r.superseded.add(client_id=client_id, seq=seq)
    return record


def decide(catalog: Catalog, request, op_id: int) -> pb.LogRecord | None:
    check_request_id(request.request_id)
    if isinstance(request, pb.AddPrincipalRequest):
        return _decide_add(catalog, request, op_id)
    if isinstance(request, AddJoinToken):
        return _decide_add(catalog, request.request, op_id, request.now_unix_ms)
    if isinstance(request, JoinServer):
        return _decide_join(catalog, request, op_id)
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


def _decide_add(
    catalog: Catalog,
    request: pb.AddPrincipalRequest,
    op_id: int,
    now_unix_ms: int | None = None,
) -> pb.LogRecord:
    check_principal_name(request.name)
    kind = request.kind or "user"
    if kind not in KINDS:
        raise BadRequest(f"unknown principal kind {kind!r}; kinds: {', '.join(KINDS)}")
    roles = check_roles(kind, list(request.roles))
    if (problem := key_problem(request.public_key)) is not None:
        raise BadRequest(problem)
    if kind == JOIN_TOKEN_KIND:
        if request.name != join_token_name(request.public_key):
            raise BadRequest(
                f"a join token is named by its key: {join_token_name(request.public_key)!r}"
            )
        if not 0 < request.ttl_s <= JOIN_TOKEN_TTL_S_MAX:
            raise BadRequest(f"a join token's TTL is 1..{JOIN_TOKEN_TTL_S_MAX} s")
        if now_unix_ms is None:  # a bare request: the deadline needs the leader's clock
            raise BadRequest("a join token is made by the coordinator leader (AddJoinToken)")
    elif request.ttl_s:
        raise BadRequest("a TTL is for join tokens only")
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
    if kind == JOIN_TOKEN_KIND:
        assert now_unix_ms is not None
        r.expires_unix_ms = now_unix_ms + request.ttl_s * 1000
    if old is not None:  # a revoked principal of that name: replaced
        r.previous_record_id = old.record_id
        for client_id, seq in old.requests[-SUPERSEDED_REQUESTS_MAX:]:
            r.superseded.add(client_id=client_id, seq=seq)
    return record


def _utc(unix_ms: int) -> str:
    when = datetime.datetime.fromtimestamp(unix_ms / 1000, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _decide_join(catalog: Catalog, request: JoinServer, op_id: int) -> pb.LogRecord | None:
    """Admit tablet server `server_uuid` with its own key, spending the caller's token.
    Refusals log nothing; the token stays as it was."""
    check_principal_name(request.server_uuid)
    if (problem := key_problem(request.public_key)) is not None:
        raise BadRequest(problem)
    token_name = catalog.principal_keys.get(request.token_key)
    token = catalog.principals.get(token_name) if token_name is not None else None
    if token is None or token.kind != JOIN_TOKEN_KIND or not token.in_force_active:
        raise PermissionDenied(
            "permission denied: the caller's key is not an unused join token "
            "(spent, revoked or unknown): make another with `coordinator join-token`"
        )
    if request.now_unix_ms >= token.expires_unix_ms:
        raise PermissionDenied(
            f"permission denied: join token {token.name} expired at "
            f"{_utc(token.expires_unix_ms)} by the coordinator leader's wall clock: make "
            "another with `coordinator join-token`"
        )
    old = catalog.principals.get(request.server_uuid)
    if old is not None:
        if old.pending_op_id:
            raise AlreadyInProgress(
                f"principal {old.name!r} is being changed (operation {old.pending_op_id})",
                retry_after_ms=100,
            )
        if old.state != REVOKED:
            if old.kind == TSERVER_KIND and old.public_key == request.public_key:
                return None  # admitted already: nothing to do, the token stays unspent
            raise AlreadyExists(
                f"a principal named {old.name!r} exists ({old.kind}, {old.state}) with another "
                "key: a join token does not replace it (revoke it first)"
            )
    holder = catalog.principal_keys.get(request.public_key)
    if holder is not None:
        raise AlreadyExists(f"that public key belongs to principal {holder!r}")
    # The count stays: the token's principal goes as the server's comes.
    record = pb.LogRecord()
    r = record.principal
    r.header.CopyFrom(header(op_id, request.request_id, pb.STARTED))
    r.action = "join"
    r.name = request.server_uuid
    r.kind = TSERVER_KIND
    r.public_key = request.public_key
    r.roles.append("server")
    r.state = ACTIVE
    r.join_token = token.name
    r.join_token_record_id = token.record_id
    carried = list(old.requests) if old is not None else []
    carried += [q for q in token.requests if q not in carried]
    for client_id, seq in carried[-SUPERSEDED_REQUESTS_MAX:]:
        r.superseded.add(client_id=client_id, seq=seq)
    if old is not None:  # a revoked principal of that name: replaced
        r.previous_record_id = old.record_id
    return record


# ---------------------------------------------------------------- apply (every node, log order)


def invalidates_at_commit(record: pb.LogRecord) -> tuple[int, ...]:
    """A join spends its token at the commit point: the token's record dies with it."""
    r = record.principal
    if r.action == "join" and r.header.phase == pb.STARTED and r.join_token_record_id:
        return (r.join_token_record_id,)
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
    if r.action == "join":
        token = catalog.principals.get(r.join_token)
        if token is not None and token.record_id == r.join_token_record_id:
            del catalog.principals[token.name]  # spent: gone, with its key
            if catalog.principal_keys.get(token.public_key) == token.name:
                del catalog.principal_keys[token.public_key]
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
        expires_unix_ms=r.expires_unix_ms,
        join_token=r.join_token,
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
                expires_unix_ms=p.expires_unix_ms,
                join_token=p.join_token,
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
