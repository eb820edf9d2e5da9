"""Principal operations (coordinator/ops/principals.py): decide, apply, complete and a replay
of the live log from scratch, on a real in-memory log store."""

from __future__ import annotations

import pytest
import zmq
from test_ops import LOG, Log

from coordinator.catalog import Catalog
from coordinator.ops import apply_record, decode, principals
from coordinator.ops.common import CompletionContext
from coordinator.records import RawEntry, decode_entry, format_view, pending_operations
from rpc.errors import AlreadyExists, AlreadyInProgress, BadRequest, IllegalState, NotFound
from rpc.protocols import coordinator_pb2 as pb


def key() -> str:
    return zmq.curve_keypair()[0].decode()


def run(log: Log, request, *, finish: bool = True) -> pb.LogRecord | None:
    record = log.run(principals, request)
    if record is not None and finish:
        ctx = CompletionContext(
            catalog=log.catalog, gateway=None, commit=log.commit, crash=lambda _name: None
        )
        principals.complete(ctx, record)
    return record


def add(log: Log, name: str, roles=("writer",), k: str | None = None, kind="user", **kw):
    req = pb.AddPrincipalRequest(
        request_id=log.rid(), name=name, kind=kind, public_key=k or key(), roles=list(roles)
    )
    return run(log, req, **kw), req


def live_records(log: Log) -> list[tuple[int, pb.LogRecord]]:
    return [
        (e.id, decode(e.data))
        for e in log.store.read(LOG, 1, 100_000)
        if decode(e.data).WhichOneof("record") == "principal"
    ]


def logged_state(c: Catalog):
    return (
        dict(c.principals),
        dict(c.principal_keys),
        {k: dict(v) for k, v in c.sessions.items()},
        sorted(c.pending),
    )


def test_add_is_in_force_at_done_and_the_key_is_taken_at_the_commit_point():
    log = Log(servers=0)
    k = key()
    record, _ = add(log, "alice", ("admin",), k, finish=False)
    p = log.catalog.principals["alice"]
    assert (p.state, p.roles, p.pending_op_id) == (
        "active",
        ("admin",),
        record.principal.header.op_id,
    )
    assert principals.roles_of_key(log.catalog, k) is None  # not in force before DONE
    with pytest.raises(AlreadyExists, match="belongs to principal 'alice'"):
        add(log, "bob", ("reader",), k)
    with pytest.raises(AlreadyInProgress):
        run(log, pb.RevokePrincipalRequest(request_id=log.rid(), name="alice"))
    ctx = CompletionContext(
        catalog=log.catalog, gateway=None, commit=log.commit, crash=lambda _name: None
    )
    principals.complete(ctx, record)
    assert principals.roles_of_key(log.catalog, k) == ("admin",)
    assert log.catalog.principals["alice"].pending_op_id == 0
    assert [r.principal.header.phase for _, r in live_records(log)] == [pb.DONE]
    assert logged_state(log.replay_fresh()) == logged_state(log.catalog)


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (dict(name=""), "needs a name"),
        (dict(name="a b"), "letters, digits"),
        (dict(name="x" * 129), "over 128"),
        (dict(public_key="short"), "40 characters"),
        (dict(public_key="~" * 40), "outside Z85"),
        (dict(roles=[]), "at least one role"),
        (dict(roles=["root"]), "unknown role 'root'"),
        (dict(roles=["server"]), "not users"),
        (dict(kind="tserver", roles=["writer"]), "server role alone"),
        (dict(kind="robot"), "unknown principal kind"),
        (dict(request_id=pb.RequestId()), "request_id"),
    ],
)
def test_bad_adds_change_nothing(change, error):
    log = Log(servers=0)
    fields = dict(
        request_id=log.rid(), name="alice", kind="user", public_key=key(), roles=["reader"]
    )
    fields.update(change)
    before = log.store.last_id(LOG)
    with pytest.raises(BadRequest, match=error):
        run(log, pb.AddPrincipalRequest(**fields))
    assert log.store.last_id(LOG) == before and log.catalog.principals == {}


def test_revoke_is_in_force_at_the_commit_point_and_one_record_per_principal_stays_live():
    log = Log(servers=0)
    add(log, "root", ("admin",))
    k = key()
    _, add_req = add(log, "alice", ("writer", "reader"), k)
    revoke = pb.RevokePrincipalRequest(request_id=log.rid(), name="alice")
    record = run(log, revoke, finish=False)
    assert principals.roles_of_key(log.catalog, k) is None  # already refused
    assert k not in log.catalog.principal_keys  # the key is free again
    ctx = CompletionContext(
        catalog=log.catalog, gateway=None, commit=log.commit, crash=lambda _name: None
    )
    principals.complete(ctx, record)
    live = live_records(log)
    assert [(r.principal.name, r.principal.state) for _, r in live] == [
        ("root", "active"),
        ("alice", "revoked"),
    ]
    fresh = log.replay_fresh()
    assert logged_state(fresh) == logged_state(log.catalog)
    # The add's record is gone from the live log: its result is still known (carried).
    result = fresh.session_result(add_req.request_id.client_id, add_req.request_id.seq)
    assert result is not None and result.done and result.principal == "alice"
    # Revoking again logs nothing; the name can be added again, with another key.
    assert run(log, pb.RevokePrincipalRequest(request_id=log.rid(), name="alice")) is None
    add(log, "alice", ("reader",))
    assert log.catalog.principals["alice"].state == "active"
    assert len(live_records(log)) == 2


def test_set_roles_pending_keeps_only_the_roles_old_and_new_share():
    log = Log(servers=0)
    add(log, "root", ("admin",))
    k = key()
    add(log, "w", ("writer",), k)
    req = pb.SetPrincipalRolesRequest(request_id=log.rid(), name="w", roles=["reader", "writer"])
    record = run(log, req, finish=False)
    assert principals.roles_of_key(log.catalog, k) == ("writer",)
    ctx = CompletionContext(
        catalog=log.catalog, gateway=None, commit=log.commit, crash=lambda _name: None
    )
    principals.complete(ctx, record)
    assert principals.roles_of_key(log.catalog, k) == ("writer", "reader")
    same = pb.SetPrincipalRolesRequest(request_id=log.rid(), name="w", roles=["writer", "reader"])
    assert run(log, same) is None
    with pytest.raises(NotFound):
        run(log, pb.SetPrincipalRolesRequest(request_id=log.rid(), name="x", roles=["reader"]))


def test_the_last_active_admin_stays():
    log = Log(servers=0)
    add(log, "root", ("admin",))
    with pytest.raises(IllegalState, match="without an active admin"):
        run(log, pb.RevokePrincipalRequest(request_id=log.rid(), name="root"))
    with pytest.raises(IllegalState, match="without an active admin"):
        run(log, pb.SetPrincipalRolesRequest(request_id=log.rid(), name="root", roles=["reader"]))
    add(log, "root2", ("admin", "reader"))
    run(log, pb.RevokePrincipalRequest(request_id=log.rid(), name="root"))
    assert log.catalog.principals["root"].state == "revoked"


def test_server_principals_and_the_log_lines():
    log = Log(servers=0)
    k = key()
    record, _ = add(log, "ts-1", ("server",), k, kind="tserver", finish=False)
    entries = list(log.store.read(LOG, 1, 100))
    view = decode_entry(RawEntry(entries[-1].id, entries[-1].data, (), True))
    assert view.type == "principal" and view.phase == "STARTED"
    assert [v.id for v in pending_operations([view])] == [view.id]
    line = format_view(view)
    assert f"add principal=ts-1 kind=tserver key={k} roles=server state=active" in line
    fresh = Catalog()
    for e in log.store.read(LOG, 1, 100):
        apply_record(fresh, e.id, decode(e.data))
    assert fresh.principals["ts-1"].pending_op_id == record.principal.header.op_id
