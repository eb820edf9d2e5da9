"""Privileged methods over real zmq sockets: only requests signed with the cluster's secret
run them (rpc/privileged.py); everything else is refused before the handler and changes
nothing."""

from __future__ import annotations

import pytest
import zmq

from rpc import errors, privileged
from rpc.addresses import endpoint
from rpc.client import RpcClient
from rpc.rpc_pb2 import PingResponse, RequestHeader, ResponseHeader, StatusCode
from rpc.server import CallContext, RpcServer

SERVER_UUID = "aaaaaaaa-2222-3333-4444-555555555555"
KEY = privileged.derive_key("cluster password")


@pytest.fixture
def server():
    srv = RpcServer(SERVER_UUID, service="test", workers=2, privileged_key=KEY)
    srv.deleted = []

    def delete(request: PingResponse, ctx: CallContext) -> PingResponse:
        srv.deleted.append(request.uuid)
        return PingResponse(uuid=request.uuid)

    srv.register("Test.Delete", PingResponse, delete, privileged=True)
    srv.register("Test.Echo", PingResponse, lambda r, ctx: r)
    with srv:
        yield srv


def test_signed_call_runs(server):
    with RpcClient(server.address, "admin", privileged_key=KEY) as c:
        assert (
            c.call(SERVER_UUID, "Test.Delete", PingResponse(uuid="t1"), PingResponse).uuid == "t1"
        )
        # the async path signs too
        pending = c.call_async(SERVER_UUID, "Test.Delete", PingResponse(uuid="t2"), PingResponse)
        assert pending.result().uuid == "t2"
    assert server.deleted == ["t1", "t2"]


@pytest.mark.parametrize(
    "key", [None, privileged.derive_key("another password")], ids=["unsigned", "wrong-secret"]
)
def test_unsigned_or_wrongly_signed_call_is_refused(server, key):
    with RpcClient(server.address, "intruder", privileged_key=key) as c:
        with pytest.raises(errors.Unauthenticated, match="privileged"):
            c.call(SERVER_UUID, "Test.Delete", PingResponse(uuid="t1"), PingResponse)
        # ordinary methods are not privileged
        assert c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="e"), PingResponse).uuid == "e"
    assert server.deleted == []


def _raw_call(address: str, header: RequestHeader, body: bytes) -> ResponseHeader:
    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 10_000)
        sock.connect(endpoint(address))
        sock.send_multipart([header.SerializeToString(), body])
        answer = ResponseHeader()
        answer.ParseFromString(sock.recv_multipart()[0])
        sock.close()
        return answer
    finally:
        ctx.term()


def test_a_tag_does_not_carry_over_to_another_body_recipient_or_caller(server):
    body = PingResponse(uuid="t1").SerializeToString()
    good = privileged.tag(KEY, "Test.Delete", SERVER_UUID, "admin", body)
    other_body = PingResponse(uuid="t2").SerializeToString()
    cases = [
        ("admin", other_body, good),  # the tag of another body
        ("someone-else", body, good),  # claimed by another caller
        ("admin", body, good[:-1]),  # truncated
        ("admin", body, b""),  # missing
    ]
    for call_id, (caller, b, tag) in enumerate(cases, 1):
        header = RequestHeader(
            call_id=call_id,
            method="Test.Delete",
            recipient_uuid=SERVER_UUID,
            caller_uuid=caller,
            timeout_ms=5000,
            auth_tag=tag,
        )
        answer = _raw_call(server.address, header, b)
        assert answer.status == StatusCode.UNAUTHENTICATED, (caller, answer)
    assert server.deleted == []
    header = RequestHeader(
        call_id=99,
        method="Test.Delete",
        recipient_uuid=SERVER_UUID,
        caller_uuid="admin",
        timeout_ms=5000,
        auth_tag=good,
    )
    assert _raw_call(server.address, header, body).status == StatusCode.OK
    assert server.deleted == ["t1"]


def test_a_server_without_a_key_leaves_privileged_methods_open():
    srv = RpcServer(SERVER_UUID, service="dev")
    srv.register("Test.Delete", PingResponse, lambda r, ctx: r, privileged=True)
    with srv, RpcClient(srv.address, "anyone") as c:
        assert c.call(SERVER_UUID, "Test.Delete", PingResponse(uuid="x"), PingResponse).uuid == "x"


def test_the_key_is_derived_and_never_the_password():
    assert privileged.derive_key("pw") != b"pw"
    assert len(privileged.derive_key("pw")) == privileged.TAG_BYTES
    assert privileged.derive_key("pw") == privileged.derive_key(b"pw")
