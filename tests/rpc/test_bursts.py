"""Answers sent in bursts (the I/O thread's turn): every request of a burst read at once gets
its own answer, refusals and inline answers in the order they were read, pool answers too.

A raw DEALER writes many requests before reading any, so the server's I/O thread finds them
queued and answers a turn's worth together (rpc/server.py READ_BATCH_MAX)."""

from __future__ import annotations

import random

import zmq

from rpc.addresses import endpoint
from rpc.rpc_pb2 import PingResponse, RequestHeader, ResponseHeader, StatusCode
from rpc.server import READ_BATCH_MAX, CallContext, Reply, RpcServer

UUID = "burst-server"


def echo(request: PingResponse, ctx: CallContext) -> Reply:
    return Reply(PingResponse(uuid=request.uuid, service=ctx.caller_uuid), list(ctx.sidecars))


def test_a_burst_of_mixed_requests_gets_every_answer_right() -> None:
    rng = random.Random(2028)
    kinds = ["inline", "pool", "misaddressed", "unknown", "malformed"]
    # More than one turn's worth, so some turns are full and one is not.
    plan = [rng.choice(kinds) for _ in range(READ_BATCH_MAX * 3 + 17)]
    server = RpcServer(UUID, "127.0.0.1:0", workers=3, queue_max=len(plan))
    server.register("Test.Inline", PingResponse, echo, inline=True)
    server.register("Test.Pool", PingResponse, echo)
    with server:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 10_000)
        sock.connect(endpoint(server.address))
        try:
            for call_id, kind in enumerate(plan, start=1):
                method = {"inline": "Test.Inline", "pool": "Test.Pool"}.get(kind, "Test.Pool")
                header = RequestHeader(
                    call_id=call_id,
                    method="Test.Nope" if kind == "unknown" else method,
                    recipient_uuid="someone-else" if kind == "misaddressed" else UUID,
                    caller_uuid=f"c{call_id}",
                    timeout_ms=10_000,
                ).SerializeToString()
                if kind == "malformed":
                    header = header + b"\xff"  # a truncated field: not a header
                body = PingResponse(uuid=str(call_id)).SerializeToString()
                sock.send_multipart([header, body, f"sidecar {call_id}".encode()])
            answers = [sock.recv_multipart() for _ in plan]
        finally:
            sock.close()
            ctx.term()
    got: dict[int, list[bytes]] = {}
    in_order: list[int] = []  # call ids of the answers the I/O thread gives itself
    for frames in answers:
        header = ResponseHeader.FromString(frames[0])
        if header.call_id == 0:  # a malformed header has no call id to echo
            assert header.status == StatusCode.BAD_REQUEST
            in_order.append(0)
            continue
        assert header.call_id not in got, "one answer per call"
        got[header.call_id] = frames
        if plan[header.call_id - 1] != "pool":
            in_order.append(header.call_id)
        kind = plan[header.call_id - 1]
        expected = {
            "inline": StatusCode.OK,
            "pool": StatusCode.OK,
            "misaddressed": StatusCode.INVALID_NAME,
            "unknown": StatusCode.BAD_REQUEST,
        }[kind]
        assert header.status == expected, (kind, header)
        assert header.server_uuid == UUID
        if expected == StatusCode.OK:
            body = PingResponse.FromString(frames[1])
            assert (body.uuid, body.service) == (str(header.call_id), f"c{header.call_id}")
            assert frames[2:] == [f"sidecar {header.call_id}".encode()]
    expected_order = [
        0 if kind == "malformed" else call_id
        for call_id, kind in enumerate(plan, start=1)
        if kind != "pool"
    ]
    assert in_order == expected_order
    assert len(got) == sum(kind != "malformed" for kind in plan)
