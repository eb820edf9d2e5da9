"""Join tokens (coordinator/ops/principals.py, design/security.md section 5): making a token
and spending it with JoinServer, decide/apply/complete on a real in-memory log, and a
replay of the live log from scratch."""

from __future__ import annotations

import pytest
from test_ops import LOG, Log
from test_principals_ops import add, key, live_records, logged_state, run

from coordinator.catalog import OpResult
from coordinator.ops import principals
from coordinator.principal_push import table_of
from coordinator.records import RawEntry, decode_entry, format_view
from rpc import authz, join_token
from rpc.errors import AlreadyExists, BadRequest, PermissionDenied
from rpc.protocols import coordinator_pb2 as pb

NOW_MS = 1_800_000_000_000
TTL_S = 600


def make_token(log: Log, *, now_ms: int = NOW_MS, ttl_s: int = TTL_S, finish: bool = True):
    text, pair = join_token.make()
    req = pb.AddPrincipalRequest(
        request_id=log.rid(),
        name=principals.join_token_name(pair.public),
        kind="join-token",
        public_key=pair.public,
        roles=["join"],
        ttl_s=ttl_s,
    )
    record = run(log, principals.AddJoinToken(req, now_unix_ms=now_ms), finish=finish)
    return text, pair, record


def join(log: Log, token_key: str, uuid: str, server_key: str, *, now_ms=NOW_MS, finish=True):
    req = principals.JoinServer(
        request_id=pb.RequestId(client_id=f"join-{uuid}", seq=1),
        server_uuid=uuid,
        public_key=server_key,
        token_key=token_key,
        now_unix_ms=now_ms,
    )
    return run(log, req, finish=finish), req


def test_token_text_round_trip_and_damage():
    text, pair = join_token.make()
    assert text.startswith("lcjt1.") and len(text) == 46
    assert join_token.keypair_of(text) == pair
    assert join_token.keypair_of(" " + text + "\n").public == pair.public
    for bad in ("", pair.secret, "lcjt1." + "#" * 40, "lcjt1." + "0" * 40, text[:-1]):
        with pytest.raises(join_token.JoinTokenError) as e:
            join_token.keypair_of(bad)
        assert pair.secret not in str(e.value)
    assert join_token.make()[1].public != pair.public  # fresh randomness each time


def test_token_is_logged_with_its_public_key_role_and_deadline():
    log = Log(servers=0)
    _, pair, record = make_token(log)
    name = principals.join_token_name(pair.public)
    p = log.catalog.principals[name]
    assert (p.kind, p.roles, p.state, p.expires_unix_ms) == (
        "join-token",
        ("join",),
        "active",
        NOW_MS + TTL_S * 1000,
    )
    assert principals.roles_of_key(log.catalog, pair.public) == ("join",)
    # The log holds the public half only.
    for _, rec in live_records(log):
        assert pair.secret not in str(rec)
    # Never pushed to tablet servers: a token may call the coordinator's JoinServer alone.
    assert name not in [e.name for e in table_of(log.catalog).entries]
    assert authz.authorize("Coordinator.JoinServer", ("join",)) is None
    for method in authz.METHOD_ROLES:
        if method != "Coordinator.JoinServer":
            assert authz.authorize(method, ("join",)) is not None, method
    for roles in (("admin",), ("server",), ("writer",)):
        assert authz.authorize("Coordinator.JoinServer", roles) is not None


def test_bad_token_requests_log_nothing():
    log = Log(servers=0)
    _, pair = join_token.make()
    name = principals.join_token_name(pair.public)
    before = log.next_id()

    def req(**kw):
        fields = dict(
            request_id=log.rid(),
            name=name,
            kind="join-token",
            public_key=pair.public,
            roles=["join"],
            ttl_s=60,
        )
        fields.update(kw)
        return pb.AddPrincipalRequest(**fields)

    cases = [
        (principals.AddJoinToken(req(name="join-abc"), NOW_MS), "named by its key"),
        (principals.AddJoinToken(req(ttl_s=0), NOW_MS), "TTL"),
        (
            principals.AddJoinToken(req(ttl_s=principals.JOIN_TOKEN_TTL_S_MAX + 1), NOW_MS),
            "TTL",
        ),
        (principals.AddJoinToken(req(roles=["server"]), NOW_MS), "join role alone"),
        (req(), "made by the coordinator leader"),  # no clock: not through the leader
        (req(kind="user", name="u1", roles=["join"], ttl_s=0), "join tokens alone"),
        (req(kind="tserver", name="t1", roles=["server"]), "TTL is for join tokens"),
    ]
    for request, match in cases:
        with pytest.raises(BadRequest, match=match):
            run(log, request)
    assert log.next_id() == before
    assert log.catalog.principals == {}


def test_join_admits_the_server_and_spends_the_token_once():
    log = Log(servers=0)
    _, tok, _ = make_token(log)
    token_name = principals.join_token_name(tok.public)
    server_key = key()
    record, req = join(log, tok.public, "ts-1", server_key, finish=False)
    r = record.principal
    assert (r.action, r.name, r.kind, list(r.roles), r.join_token) == (
        "join",
        "ts-1",
        "tserver",
        ["server"],
        token_name,
    )
    # The commit point spends the token (gone, with its key) ...
    assert token_name not in log.catalog.principals
    assert principals.roles_of_key(log.catalog, tok.public) is None
    # ... and the server is in force at DONE only.
    assert principals.roles_of_key(log.catalog, server_key) is None
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        join(log, tok.public, "ts-2", key())
    ctx = principals.CompletionContext(
        catalog=log.catalog, gateway=None, commit=log.commit, crash=lambda _name: None
    )
    principals.complete(ctx, record)
    assert principals.roles_of_key(log.catalog, server_key) == ("server",)
    p = log.catalog.principals["ts-1"]
    assert (p.kind, p.public_key, p.state, p.join_token) == (
        "tserver",
        server_key,
        "active",
        token_name,
    )
    # A retry of the same join (same request id: after a lost answer or a failover) is
    # answered from the sessions with the first answer, never decided again.
    assert log.catalog.session_result(req.request_id.client_id, 1) == OpResult(
        record.principal.header.op_id, principals.KIND, True, principal="ts-1"
    )
    # A second server with the spent token: refused, nothing logged, nothing changed.
    state, last = logged_state(log.catalog), log.next_id()
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        join(log, tok.public, "ts-2", key())
    assert (logged_state(log.catalog), log.next_id()) == (state, last)
    # One live record per principal: the server's DONE; the token's records are dead.
    assert [(rec.principal.name, rec.principal.header.phase) for _, rec in live_records(log)] == [
        ("ts-1", pb.DONE)
    ]
    fresh = log.replay_fresh()
    assert logged_state(fresh) == logged_state(log.catalog)
    assert fresh.session_result("join-ts-1", 1).principal == "ts-1"
    # Later records of the server keep how it joined.
    run(log, pb.RevokePrincipalRequest(request_id=log.rid(), name="ts-1"))
    assert log.catalog.principals["ts-1"].join_token == token_name


def test_expired_token_is_refused_and_nothing_changes():
    log = Log(servers=0)
    _, tok, _ = make_token(log, ttl_s=60)
    deadline = NOW_MS + 60_000
    state, last = logged_state(log.catalog), log.next_id()
    for now in (deadline, deadline + 1, deadline + 86_400_000):
        with pytest.raises(
            PermissionDenied, match="expired at .* by the coordinator leader's wall clock"
        ):
            join(log, tok.public, "ts-1", key(), now_ms=now)
    assert (logged_state(log.catalog), log.next_id()) == (state, last)
    join(log, tok.public, "ts-1", key(), now_ms=deadline - 1)  # just before: admitted
    assert log.catalog.principals["ts-1"].state == "active"


def test_join_refusals_leave_the_token_unspent():
    log = Log(servers=0)
    _, tok, _ = make_token(log)
    admin_key = key()
    add(log, "admin", ("admin",), admin_key)
    existing_key = key()
    add(log, "ts-old", ("server",), existing_key, kind="tserver")
    _, pending_tok, _ = make_token(log, finish=False)
    state, last = logged_state(log.catalog), log.next_id()
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        join(log, admin_key, "ts-1", key())  # a user's key is not a token
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        join(log, pending_tok.public, "ts-1", key())  # a token not done yet
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        join(log, key(), "ts-1", key())  # unknown
    with pytest.raises(AlreadyExists, match="with another key"):
        join(log, tok.public, "ts-old", key())  # an admitted server's key is not replaced
    with pytest.raises(AlreadyExists, match="belongs to principal 'admin'"):
        join(log, tok.public, "ts-1", admin_key)
    with pytest.raises(BadRequest):
        join(log, tok.public, "ts-1", "0" * 40)
    with pytest.raises(BadRequest):
        join(log, tok.public, "bad name!", key())
    assert join(log, tok.public, "ts-old", existing_key)[0] is None  # admitted already
    assert (logged_state(log.catalog), log.next_id()) == (state, last)
    # A revoked token is refused too.
    run(
        log,
        pb.RevokePrincipalRequest(
            request_id=log.rid(), name=principals.join_token_name(tok.public)
        ),
    )
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        join(log, tok.public, "ts-1", key())


def test_join_replaces_a_revoked_server_of_that_uuid():
    log = Log(servers=0)
    add(log, "admin", ("admin",))
    add(log, "ts-1", ("server",), kind="tserver")
    run(log, pb.RevokePrincipalRequest(request_id=log.rid(), name="ts-1"))
    _, tok, _ = make_token(log)
    new_key = key()
    join(log, tok.public, "ts-1", new_key)
    p = log.catalog.principals["ts-1"]
    assert (p.public_key, p.state) == (new_key, "active")
    assert sorted(n for n in log.catalog.principals) == ["admin", "ts-1"]
    assert logged_state(log.replay_fresh()) == logged_state(log.catalog)


def test_log_lines_name_the_deadline_and_the_spent_token():
    log = Log(servers=0)

    def last_line() -> str:
        entries = list(log.store.read(LOG, 1, 100))
        return format_view(decode_entry(RawEntry(entries[-1].id, entries[-1].data, (), True)))

    _, tok, token_record = make_token(log, finish=False)
    name = principals.join_token_name(tok.public)
    line = last_line()
    assert f"add principal={name} kind=join-token key={tok.public} roles=join" in line
    assert "expires=2027-01-15T08:10:00Z" in line
    run_done = principals.CompletionContext(
        catalog=log.catalog, gateway=None, commit=log.commit, crash=lambda _name: None
    )
    principals.complete(run_done, token_record)
    token_id = log.catalog.principals[name].record_id
    join(log, tok.public, "ts-1", key(), finish=False)
    line = last_line()
    assert "join principal=ts-1 kind=tserver" in line
    assert f"join_token={name} spends=#{token_id}" in line
    assert tok.secret not in line
