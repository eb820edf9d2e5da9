"""JoinServer across a leader failover (design/security.md section 5): in-process engines on
one real in-memory log store (tests/coordinator/test_engine.py's harness). A leader that
dies at each crash point of the join is replaced; the tablet server's retry of the same join
(same request id, uuid and key) gets the first answer from the new leader, the server is
admitted once and the token is spent once, or, before the commit point, nothing is left."""

from __future__ import annotations

import pytest
from test_engine import Crashed, cluster, crash_exit  # noqa: F401 - the fixture

from coordinator.crashpoints import CrashPoints, points_of
from coordinator.ops import principals
from rpc import join_token
from rpc.errors import PermissionDenied
from rpc.keys import KeyPair
from rpc.protocols import coordinator_pb2 as pb

NOW_MS = 1_800_000_000_000


def make_token(engine, pair: KeyPair) -> str:
    name = principals.join_token_name(pair.public)
    request = pb.AddPrincipalRequest(
        request_id=pb.RequestId(client_id="admin", seq=1),
        name=name,
        kind="join-token",
        public_key=pair.public,
        roles=["join"],
        ttl_s=600,
    )
    engine.execute(principals.KIND, principals.AddJoinToken(request, NOW_MS))
    return name


def join_request(token: KeyPair, server: KeyPair, uuid: str = "ts-1") -> principals.JoinServer:
    return principals.JoinServer(
        request_id=pb.RequestId(client_id=f"join-{uuid}", seq=1),
        server_uuid=uuid,
        public_key=server.public,
        token_key=token.public,
        now_unix_ms=NOW_MS + 1000,
    )


@pytest.mark.parametrize("point", points_of(principals.KIND))
def test_join_retried_after_a_failover_gets_the_first_answer(cluster, point):  # noqa: F811
    a = cluster.add("a")
    cluster.leader()
    _, token = join_token.make()
    server = KeyPair.generate()
    token_name = make_token(a.engine, token)
    a.engine.crash = CrashPoints(point, 1, exit=crash_exit)
    with pytest.raises(Crashed):
        a.engine.execute(principals.KIND, join_request(token, server))
    b = cluster.add("b")
    a.kill()
    assert cluster.leader() is b
    committed = point != "principal.before_commit_point"
    cat = b.catalog
    if not committed:  # no trace: the token is as it was, the server unknown
        assert token_name in cat.principals and "ts-1" not in cat.principals
    # The tablet server's retry: the same request id, uuid and key.
    answer = b.engine.execute(principals.KIND, join_request(token, server))
    assert answer.name == "ts-1"
    p = cat.principals["ts-1"]
    assert (p.kind, p.public_key, p.in_force_active, p.join_token) == (
        "tserver",
        server.public,
        True,
        token_name,
    )
    assert token_name not in cat.principals and not cat.pending
    joins = [r.principal for r in cluster.records("principal") if r.principal.action == "join"]
    assert len({j.header.op_id for j in joins}) == 1  # one operation, never a second
    # Another server with the spent token: refused on the new leader too.
    with pytest.raises(PermissionDenied, match="not an unused join token"):
        b.engine.execute(principals.KIND, join_request(token, KeyPair.generate(), "ts-2"))
