"""The caller's side reads an OK answer without decoding its header (rpc/client.py,
_DirectSocket.ok_rest): the header of an OK answer from one server is the same bytes for
every call but its id, so the answer awaited is recognized by comparing bytes. These tests
show that this happens (the header decoder is not called per answer) and that it never
gives a call an answer that protobuf would read as another call's: answers out of order,
errors among OK answers, duplicates, answers whose server UUID changes, and a header whose
rest names a call id of its own. The odd answers come from a bare ROUTER socket over TCP.
"""

from __future__ import annotations

import random
import threading

import pytest
import zmq

from rpc import client as rpc_client
from rpc import errors
from rpc.client import RpcClient
from rpc.frames import varint
from rpc.rpc_pb2 import PingResponse, RequestHeader, ResponseHeader, StatusCode
from rpc.server import CallContext, Reply, RpcServer

UUID = "answers-server"

# Every varint length of a call id, and the edges between them.
EDGES = sorted({1, *(v for k in range(1, 10) for v in (2 ** (7 * k) - 1, 2 ** (7 * k)))})
CALL_IDS = [n for n in EDGES if n < 2**64] + [2**64 - 1]


def echo(request: PingResponse, ctx: CallContext) -> Reply:
    return Reply(PingResponse(uuid=request.uuid, service=ctx.caller_uuid), list(ctx.sidecars))


def test_call_id_prefix_is_protobufs() -> None:
    rng = random.Random(28)
    tail = RequestHeader(
        method="Test.Echo", recipient_uuid=UUID, caller_uuid="c", timeout_ms=5000
    ).SerializeToString()
    ok_rest = ResponseHeader(status=StatusCode.OK, server_uuid=UUID).SerializeToString()
    for call_id in CALL_IDS + [rng.getrandbits(rng.randint(1, 64)) or 1 for _ in range(2000)]:
        prefix = rpc_client._call_id_prefix(call_id)
        assert prefix == b"\x08" + varint(call_id)
        assert (
            prefix + tail
            == RequestHeader(
                call_id=call_id,
                method="Test.Echo",
                recipient_uuid=UUID,
                caller_uuid="c",
                timeout_ms=5000,
            ).SerializeToString()
        )
        parsed = ResponseHeader.FromString(prefix + ok_rest)
        assert (parsed.call_id, parsed.status, parsed.server_uuid) == (
            call_id,
            StatusCode.OK,
            UUID,
        )


@pytest.fixture
def counted_decodes(monkeypatch) -> list[int]:
    """How many answer headers the client decodes (rpc.client._parse_response_header)."""
    count = [0]
    parse = rpc_client._parse_response_header

    def counting(data):
        count[0] += 1
        return parse(data)

    monkeypatch.setattr(rpc_client, "_parse_response_header", counting)
    return count


def test_ok_answers_are_read_without_decoding_their_header(counted_decodes) -> None:
    # One worker: the pool's answers come in order, as the inline ones (answers out of
    # order are decoded, kept for their calls: the next test).
    server = RpcServer(UUID, "127.0.0.1:0", workers=1)
    server.register("Test.Echo", PingResponse, echo)
    server.register("Test.EchoInline", PingResponse, echo, inline=True)
    calls = 512
    decodes: dict[str, int] = {}
    with server, RpcClient(server.address, "caller") as client:
        for method in ("Test.EchoInline", "Test.Echo"):
            before = counted_decodes[0]
            pending: list = []
            got: list[str] = []
            for i in range(calls):
                request = PingResponse(uuid=f"{method} {i}")
                sidecar = f"sidecar {i}".encode()
                pending.append(client.call_async(UUID, method, request, PingResponse,
                                                 sidecars=[sidecar]))  # fmt: skip
                if len(pending) == 64 or i == calls - 1:
                    for k, call in enumerate(pending, start=i + 1 - len(pending)):
                        if k % 2:
                            got.append(call.result().uuid)
                            continue
                        response, sidecars = call.result_with_sidecars()
                        assert bytes(sidecars[0]) == f"sidecar {k}".encode()
                        got.append(response.uuid)
                    pending.clear()
            assert got == [f"{method} {i}" for i in range(calls)]
            decodes[method] = counted_decodes[0] - before
        before = counted_decodes[0]
        for i in range(calls):
            response = client.call(UUID, "Test.EchoInline", PingResponse(uuid=str(i)), PingResponse)
            assert response.uuid == str(i)
        decodes["synchronous"] = counted_decodes[0] - before
    # The first OK answer is decoded, and the bytes learned from it once more (checked to
    # name no call); no other. On the old code every answer was decoded (512 each).
    assert decodes == {"Test.EchoInline": 2, "Test.Echo": 0, "synchronous": 0}, decodes


class Router:
    """A bare ROUTER on 127.0.0.1 in a thread: `rule(header, body, replies)` appends the
    messages ([header, body, *sidecars]) to send back for each request read."""

    def __init__(self, rule) -> None:
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.address = f"127.0.0.1:{port}"
        self._rule = rule
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-router", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._sock.poll(50):
                continue
            identity, header, body, *_ = self._sock.recv_multipart()
            replies: list[list[bytes]] = []
            self._rule(RequestHeader.FromString(header), body, replies)
            for reply in replies:
                self._sock.send_multipart([identity, *reply])

    def __enter__(self) -> Router:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)
        self._sock.close()
        self._ctx.term()


def ok(call_id: int, server_uuid: str, body: bytes) -> list[bytes]:
    header = ResponseHeader(call_id=call_id, status=StatusCode.OK, server_uuid=server_uuid)
    return [header.SerializeToString(), body]


def test_answers_out_of_order_errors_duplicates_and_other_servers() -> None:
    # Answers held and sent in reverse, eight at a time, each twice; every third one a
    # NOT_FOUND, the OK ones from two server UUIDs in turn (so the learned OK bytes match
    # only some of them).
    held: list[list[bytes]] = []

    def rule(header: RequestHeader, body: bytes, replies: list) -> None:
        n = int(PingResponse.FromString(body).uuid)
        if n % 3 == 2:
            answer = [
                ResponseHeader(
                    call_id=header.call_id, status=StatusCode.NOT_FOUND, message=f"no {n}"
                ).SerializeToString(),
                b"",
            ]
        else:
            answer = ok(header.call_id, "a" if n % 2 else "bb", body)
        if n >= 64:  # the synchronous calls after: at once, once
            replies.append(answer)
            return
        held.append(answer)
        if len(held) == 8:
            for reply in reversed(held):
                replies += [reply, reply]
            held.clear()

    with Router(rule) as router, RpcClient(router.address, "caller") as client:
        pending = [
            client.call_async(
                UUID, "Test.Echo", PingResponse(uuid=str(n)), PingResponse, timeout_s=10
            )  # fmt: skip
            for n in range(64)
        ]
        for n, call in enumerate(pending):
            if n % 3 == 2:
                with pytest.raises(errors.NotFound, match=f"no {n}$"):
                    call.result()
            else:
                assert call.result().uuid == str(n)
        # Duplicates of the last answers may still come: each call after them gets its own.
        for n in range(64, 72):
            if n % 3 == 2:
                with pytest.raises(errors.NotFound):
                    client.call(UUID, "Test.Echo", PingResponse(uuid=str(n)), PingResponse,
                                timeout_s=10)  # fmt: skip
            else:
                response = client.call(UUID, "Test.Echo", PingResponse(uuid=str(n)),
                                       PingResponse, timeout_s=10)  # fmt: skip
                assert response.uuid == str(n)


def test_an_ok_header_whose_rest_names_a_call_is_not_taken_for_later_calls() -> None:
    # Every OK header names the first call once more after its own id (protobuf: the last
    # value wins, so each is the first call's answer). Only the first call is answered;
    # had the client learned those bytes as "OK but for the id", the later calls would
    # have taken the first call's answers for their own.
    first: list[int] = []

    def rule(header: RequestHeader, body: bytes, replies: list) -> None:
        if not first:
            first.append(header.call_id)
        rest = ResponseHeader(status=StatusCode.OK, server_uuid=UUID).SerializeToString()
        rest += b"\x08" + varint(first[0])
        replies.append([b"\x08" + varint(header.call_id) + rest, body])

    with Router(rule) as router, RpcClient(router.address, "caller") as client:
        assert client.call(UUID, "Test.Echo", PingResponse(uuid="0"), PingResponse).uuid == "0"
        for n in (1, 2):
            with pytest.raises(errors.TimedOut):
                client.call(UUID, "Test.Echo", PingResponse(uuid=str(n)), PingResponse,
                            timeout_s=0.3)  # fmt: skip
        late = client.call_async(UUID, "Test.Echo", PingResponse(uuid="3"), PingResponse,
                                 timeout_s=0.3)  # fmt: skip
        with pytest.raises(errors.TimedOut):
            late.result()
