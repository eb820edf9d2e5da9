"""The rpc layer over real zmq sockets on 127.0.0.1: calls, limits, malformed input, restarts."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import zmq

from rpc import client as rpc_client
from rpc import errors
from rpc.addresses import endpoint
from rpc.client import ConnectionLost, NotConnected, RpcClient, Transport
from rpc.errors import LeaderHintValue
from rpc.rpc_pb2 import (
    PingResponse,
    RequestHeader,
    ResponseHeader,
    StatusCode,
)
from rpc.server import CallContext, Reply, RpcServer, Serialized
from tests.support.procs import free_port, wait_for

SERVER_UUID = "11111111-2222-3333-4444-555555555555"


def echo(request: PingResponse, ctx: CallContext) -> Reply:
    return Reply(PingResponse(uuid=request.uuid, service=ctx.caller_uuid), list(ctx.sidecars))


@pytest.fixture
def server():
    srv = RpcServer(SERVER_UUID, "127.0.0.1:0", service="test", workers=4, queue_max=64)
    srv.register("Test.Echo", PingResponse, echo)
    calls: list[str] = []

    def record(request: PingResponse, ctx: CallContext) -> PingResponse:
        calls.append(request.uuid)
        return PingResponse(uuid=request.uuid)

    def fail(request: PingResponse, ctx: CallContext) -> PingResponse:
        if request.uuid == "bug":
            raise ZeroDivisionError("handler bug")
        raise errors.NotLeader(
            "not me",
            leader_hint=LeaderHintValue("leader-uuid", "127.0.0.1:9", 7),
            body=PingResponse(uuid="detail").SerializeToString(),
        )

    srv.register("Test.Record", PingResponse, record)
    srv.register("Test.Fail", PingResponse, fail)
    srv.recorded = calls
    with srv:
        yield srv


@pytest.fixture
def client(server):
    with RpcClient(server.address, "client-1") as c:
        yield c


def raw_dealer(address: str) -> tuple[zmq.Context, zmq.Socket]:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(endpoint(address))
    return ctx, sock


def raw_exchange(address: str, frames: list[bytes]) -> ResponseHeader:
    ctx, sock = raw_dealer(address)
    try:
        sock.send_multipart(frames)
        answer = sock.recv_multipart()
        header = ResponseHeader()
        header.ParseFromString(answer[0])
        return header
    finally:
        sock.close()
        ctx.term()


def request_header(method: str, recipient: str = SERVER_UUID, call_id: int = 5) -> bytes:
    return RequestHeader(
        call_id=call_id, method=method, recipient_uuid=recipient, timeout_ms=5000
    ).SerializeToString()


def test_ping_learns_uuid_and_methods(client):
    answer = client.ping()
    assert answer.uuid == SERVER_UUID
    assert "Test.Echo" in answer.methods


def test_call_round_trip_carries_caller_uuid(client):
    answer = client.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="x"), PingResponse)
    assert answer.uuid == "x"
    assert answer.service == "client-1"


def test_many_clients_many_calls_in_flight(server):
    transport = Transport()
    clients = [RpcClient(server.address, f"c{i}", transport=transport) for i in range(8)]

    def worker(i: int) -> list[str]:
        c = clients[i % len(clients)]
        return [
            c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid=f"{i}-{k}"), PingResponse).uuid
            for k in range(50)
        ]

    try:
        with ThreadPoolExecutor(32) as pool:
            results = list(pool.map(worker, range(32)))
    finally:
        transport.close()
    for i, got in enumerate(results):
        assert got == [f"{i}-{k}" for k in range(50)]


def test_wrong_recipient_is_refused_and_has_no_effect(server, client):
    with pytest.raises(errors.InvalidName):
        client.call("someone-else", "Test.Record", PingResponse(uuid="a"), PingResponse)
    with pytest.raises(errors.InvalidName):
        client.call("", "Test.Record", PingResponse(uuid="b"), PingResponse)
    assert server.recorded == []
    assert server.stats()["invalid_name"] == 2
    client.call(SERVER_UUID, "Test.Record", PingResponse(uuid="c"), PingResponse)
    assert server.recorded == ["c"]


def test_a_flood_of_refused_calls_is_logged_a_little_and_counted_whole(server, client, caplog):
    """Each refusal is answered and counted; only the first REFUSALS_LOGGED_MAX of a window
    are logged (a peer sending thousands a second must not fill the disk with warnings)."""
    import logging

    from rpc.server import REFUSALS_LOGGED_MAX

    caplog.set_level(logging.WARNING, logger="rpc.server")
    n = REFUSALS_LOGGED_MAX * 10
    for i in range(n):
        with pytest.raises(errors.InvalidName):
            client.call("someone-else", "Test.Record", PingResponse(uuid=str(i)), PingResponse)
    assert server.stats()["invalid_name"] == n
    assert server.recorded == []
    refusals = [r for r in caplog.records if "rejected a request" in r.getMessage()]
    assert len(refusals) == REFUSALS_LOGGED_MAX
    client.call(SERVER_UUID, "Test.Record", PingResponse(uuid="ok"), PingResponse)
    assert server.recorded == ["ok"]


def test_refusals_not_logged_are_summed_up_when_the_next_window_opens(caplog, monkeypatch):
    import logging

    from rpc import refusals as refusals_module
    from rpc import server as rpc_server

    now = [100.0]
    monkeypatch.setattr(refusals_module.time, "monotonic", lambda: now[0])
    caplog.set_level(logging.WARNING, logger="rpc.server")
    refusals = rpc_server._refusal_log(burst=2, window_s=10.0)
    for i in range(5):
        refusals.warning("refused %d", i)
    assert [r.getMessage() for r in caplog.records] == ["refused 0", "refused 1"]
    now[0] += 10.0
    refusals.warning("refused %d", 5)
    assert [r.getMessage() for r in caplog.records][2:] == [
        "3 more refused calls were not logged (at most 2 per 10 s; all are counted in the "
        "server's stats)",
        "refused 5",
    ]


def test_error_carries_status_hint_and_body(client):
    with pytest.raises(errors.NotLeader) as info:
        client.call(SERVER_UUID, "Test.Fail", PingResponse(), PingResponse)
    err = info.value
    assert err.leader_hint == LeaderHintValue("leader-uuid", "127.0.0.1:9", 7)
    assert err.decode_body(PingResponse).uuid == "detail"
    assert err.server_uuid == SERVER_UUID


def test_handler_bug_answers_internal_and_server_keeps_serving(server, client):
    with pytest.raises(errors.Internal, match="handler bug"):
        client.call(SERVER_UUID, "Test.Fail", PingResponse(uuid="bug"), PingResponse)
    assert (
        client.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="after"), PingResponse).uuid
        == "after"
    )


def test_deadline_expiry_times_out_and_late_answer_is_dropped():
    release = threading.Event()

    def slow(request, ctx):
        release.wait(10)
        return PingResponse(uuid="late")

    srv = RpcServer(SERVER_UUID, service="slow", workers=2)
    srv.register("Test.Slow", PingResponse, slow)
    srv.register("Test.Echo", PingResponse, echo)
    with srv, RpcClient(srv.address, "c") as c:
        # The handler is still blocked: the caller gave up at its own deadline.
        with pytest.raises(errors.TimedOut):
            c.call(SERVER_UUID, "Test.Slow", PingResponse(), PingResponse, timeout_s=0.2)
        assert not release.is_set()
        release.set()
        # The late answer to the expired call must not be taken as the answer to this one.
        assert (
            c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="next"), PingResponse).uuid == "next"
        )


def test_bounded_queue_throttles():
    release = threading.Event()
    entered = threading.Semaphore(0)

    def block(request, ctx):
        entered.release()
        release.wait(10)
        return PingResponse(uuid=request.uuid)

    srv = RpcServer(SERVER_UUID, service="busy", workers=1, queue_max=1)
    srv.register("Test.Block", PingResponse, block)
    with srv, RpcClient(srv.address, "c") as c, ThreadPoolExecutor(4) as pool:
        first = pool.submit(c.call, SERVER_UUID, "Test.Block", PingResponse(uuid="1"), PingResponse)
        assert entered.acquire(timeout=5)
        second = pool.submit(
            c.call, SERVER_UUID, "Test.Block", PingResponse(uuid="2"), PingResponse
        )
        wait_for(lambda: srv.stats()["inflight"] == 2, 5, "second call queued")
        with pytest.raises(errors.Throttled) as info:
            c.call(SERVER_UUID, "Test.Block", PingResponse(uuid="3"), PingResponse)
        assert info.value.retry_after_ms > 0
        release.set()
        assert first.result(5).uuid == "1"
        assert second.result(5).uuid == "2"
    assert srv.stats()["throttled"] == 1


@pytest.mark.parametrize("size_mib", [16])
def test_large_sidecars_arrive_intact_both_ways(client, size_mib):
    payloads = [os.urandom(size_mib << 20), os.urandom(1 << 20)]
    answer, sidecars = client.call_with_sidecars(
        SERVER_UUID,
        "Test.Echo",
        PingResponse(uuid="big"),
        PingResponse,
        sidecars=payloads,
        timeout_s=30,
    )
    assert answer.uuid == "big"
    assert [hashlib.sha256(s).hexdigest() for s in sidecars] == [
        hashlib.sha256(p).hexdigest() for p in payloads
    ]


def test_oversized_request_is_refused_by_client_and_server():
    srv = RpcServer(SERVER_UUID, service="small", message_bytes_max=64 * 1024)
    srv.register("Test.Echo", PingResponse, echo)
    with srv:
        # The client refuses to send it...
        with RpcClient(srv.address, "c") as c:
            with pytest.raises(errors.BadRequest, match="exceeds"):
                c.call(
                    SERVER_UUID, "Test.Echo", PingResponse(), PingResponse, sidecars=[b"x" * 70_000]
                )
        # ...and a raw sender that does gets BAD_REQUEST.
        header = raw_exchange(srv.address, [request_header("Test.Echo"), b"", b"x" * 100_000])
        assert header.status == StatusCode.BAD_REQUEST
        assert "exceeds" in header.message
        assert header.call_id == 5
        with RpcClient(srv.address, "c") as c:
            assert (
                c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="ok"), PingResponse).uuid == "ok"
            )


@pytest.mark.parametrize(
    "frames,expected",
    [
        pytest.param([b"only-one-frame"], StatusCode.BAD_REQUEST, id="missing-frames"),
        pytest.param([b"\xff\xff\xff\xff\xff", b""], StatusCode.BAD_REQUEST, id="bad-header"),
        pytest.param(
            [request_header("Test.Echo"), b"\xff\xff\xff\xff"],
            StatusCode.BAD_REQUEST,
            id="bad-body",
        ),
        pytest.param(
            [request_header("Test.Nope"), b""], StatusCode.BAD_REQUEST, id="unknown-method"
        ),
        pytest.param(
            [request_header("Test.Echo", recipient="other"), b""],
            StatusCode.INVALID_NAME,
            id="wrong-recipient",
        ),
    ],
)
def test_malformed_input_gets_an_answer_and_server_keeps_serving(server, client, frames, expected):
    header = raw_exchange(server.address, frames)
    assert header.status == expected, header
    assert header.message
    assert (
        client.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="alive"), PingResponse).uuid
        == "alive"
    )


def test_random_garbage_never_breaks_the_server(server, client):
    rng = random.Random(1234)
    ctx, sock = raw_dealer(server.address)
    try:
        for _ in range(200):
            frames = [rng.randbytes(rng.randrange(0, 64)) for _ in range(rng.randrange(1, 4))]
            sock.send_multipart(frames)
            answer = sock.recv_multipart()
            header = ResponseHeader()
            header.ParseFromString(answer[0])
            assert header.status in (StatusCode.BAD_REQUEST, StatusCode.INVALID_NAME), header
    finally:
        sock.close()
        ctx.term()
    stats = server.stats()
    assert stats["bad_request"] + stats["invalid_name"] == 200
    assert (
        client.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="alive"), PingResponse).uuid
        == "alive"
    )


def start_echo_process(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.rpc.echo_server", SERVER_UUID, f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.startswith("READY"), line
    return proc


@pytest.mark.integration
def test_server_restart_mid_stream():
    port = free_port()
    proc = start_echo_process(port)
    address = f"127.0.0.1:{port}"
    stop = threading.Event()
    outcomes: dict[str, int] = {"ok": 0, "lost": 0, "not_sent": 0, "timed_out": 0}
    lock = threading.Lock()

    try:
        with RpcClient(address, "c") as c:

            def hammer() -> None:
                while not stop.is_set():
                    try:
                        c.call(
                            SERVER_UUID,
                            "Test.Echo",
                            PingResponse(uuid="n"),
                            PingResponse,
                            timeout_s=2,
                        )
                        key = "ok"
                    except ConnectionLost:
                        key = "lost"
                    except NotConnected:
                        key = "not_sent"
                    except errors.TimedOut:
                        key = "timed_out"
                    with lock:
                        outcomes[key] += 1

            threads = [threading.Thread(target=hammer) for _ in range(4)]
            for t in threads:
                t.start()
            wait_for(lambda: outcomes["ok"] > 50, 10, "calls flowing")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            proc = start_echo_process(port)
            ok_before = outcomes["ok"]
            wait_for(lambda: outcomes["ok"] > ok_before + 50, 20, "calls flowing after restart")
            # Idempotent calls ride over a restart without the caller noticing.
            assert (
                c.call(
                    SERVER_UUID,
                    "Test.Echo",
                    PingResponse(uuid="r"),
                    PingResponse,
                    timeout_s=10,
                    idempotent=True,
                ).uuid
                == "r"
            )
            stop.set()
            for t in threads:
                t.join(10)
    finally:
        stop.set()
        proc.kill()
        proc.wait(10)
    assert outcomes["ok"] > 100


@pytest.mark.integration
def test_idempotent_call_waits_for_a_server_that_is_not_up_yet():
    port = free_port()
    address = f"127.0.0.1:{port}"
    result: dict[str, str] = {}
    with RpcClient(address, "c") as c:

        def call() -> None:
            result["uuid"] = c.call(
                SERVER_UUID,
                "Test.Echo",
                PingResponse(uuid="early"),
                PingResponse,
                timeout_s=20,
                idempotent=True,
            ).uuid

        t = threading.Thread(target=call)
        t.start()
        proc = start_echo_process(port)
        try:
            t.join(20)
            assert result == {"uuid": "early"}
        finally:
            proc.kill()
            proc.wait(10)


def test_unreachable_server_times_out_with_clear_message():
    with RpcClient(f"127.0.0.1:{free_port()}", "c") as c:
        with pytest.raises(errors.TimedOut, match="not connected"):
            c.call(SERVER_UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=0.3)


def test_bad_address_is_a_clear_error():
    with pytest.raises(errors.BadRequest, match="host:port"):
        RpcClient("no-port-here")


def test_unreachable_server_fails_fast_when_not_connected():
    # A caller with a long deadline learns quickly that nobody listens, and nothing was sent.
    # (Waiting out the deadline would raise TimedOut instead.)
    with RpcClient(f"127.0.0.1:{free_port()}", "c") as c:
        with pytest.raises(NotConnected, match="not connected"):
            c.call(SERVER_UUID, "Test.Echo", PingResponse(), PingResponse, timeout_s=30)


def test_pipelined_async_calls_carry_sidecars(client):
    pending = [
        client.call_async(
            SERVER_UUID, "Test.Echo", PingResponse(uuid=str(i)), PingResponse,
            sidecars=[bytes([i]) * (i + 1)],
        )
        for i in range(32)
    ]  # fmt: skip
    for i, p in enumerate(pending):
        answer, sidecars = p.result_with_sidecars()
        assert answer.uuid == str(i)
        assert [bytes(s) for s in sidecars] == [bytes([i]) * (i + 1)]


def test_serialized_body_is_sent_as_is_inline_and_on_the_pool():
    cached = Serialized(PingResponse(uuid="cached").SerializeToString())
    srv = RpcServer(SERVER_UUID, service="cache", workers=2)
    srv.register("Test.Cached", PingResponse, lambda request, ctx: cached)
    srv.register("Test.CachedInline", PingResponse, lambda request, ctx: cached, inline=True)
    srv.register("Test.CachedReply", PingResponse, lambda request, ctx: Reply(cached, [b"side"]))
    with srv, RpcClient(srv.address, "c") as c:
        for method in ("Test.Cached", "Test.CachedInline"):
            assert c.call(SERVER_UUID, method, PingResponse(), PingResponse).uuid == "cached"
        answer, sidecars = c.call_with_sidecars(
            SERVER_UUID, "Test.CachedReply", PingResponse(), PingResponse
        )
        assert answer.uuid == "cached" and [bytes(s) for s in sidecars] == [b"side"]


def test_handler_returning_no_message_answers_internal():
    srv = RpcServer(SERVER_UUID, service="bug", workers=1)
    srv.register("Test.Bytes", PingResponse, lambda request, ctx: b"not a message", inline=True)
    srv.register("Test.None", PingResponse, lambda request, ctx: None)
    srv.register("Test.Echo", PingResponse, echo)
    with srv, RpcClient(srv.address, "c") as c:
        for method in ("Test.Bytes", "Test.None"):
            with pytest.raises(errors.Internal, match="handler returned"):
                c.call(SERVER_UUID, method, PingResponse(), PingResponse)
        assert c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="ok"), PingResponse).uuid == "ok"
    assert srv.stats()["internal"] == 2


def test_stats_count_calls_on_the_io_thread_and_on_the_pool():
    srv = RpcServer(SERVER_UUID, service="stats", workers=2)
    srv.register("Test.Echo", PingResponse, echo)
    srv.register("Test.EchoInline", PingResponse, echo, inline=True)
    with srv, RpcClient(srv.address, "c") as c:
        for i in range(5):
            c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid=str(i)), PingResponse)
        for i in range(7):
            c.call(SERVER_UUID, "Test.EchoInline", PingResponse(uuid=str(i)), PingResponse)
        with pytest.raises(errors.InvalidName):
            c.call("someone-else", "Test.EchoInline", PingResponse(), PingResponse)
        stats = srv.stats()
    assert stats["requests"] == 13
    assert stats["ok"] == 12
    assert stats["invalid_name"] == 1
    assert stats["inflight"] == 0


def test_call_on_a_socket_the_transport_closed_meanwhile_is_unavailable(server):
    """A thread's direct socket is cached; another thread closes the transport (a client
    dropped while a writer still holds it). The next call on that thread fails as an rpc
    error (UNAVAILABLE), not as a zmq error from a closed socket (ENOTSOCK), which killed
    a test's writer thread once."""
    client = RpcClient(server.address, "c")
    assert client.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="1"), PingResponse).uuid == "1"
    closer = threading.Thread(target=client.close)
    closer.start()
    closer.join(10)
    with pytest.raises(errors.Unavailable, match="closed"):
        client.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="2"), PingResponse)


def test_transports_share_one_context_and_outlive_each_other(server):
    with rpc_client._context_lock:
        others = rpc_client._context_users  # transports left open by other tests, if any
    first, second = Transport(), Transport()
    try:
        assert first._ctx is second._ctx
        a = RpcClient(server.address, "a", transport=first)
        b = RpcClient(server.address, "b", transport=second)
        assert a.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="1"), PingResponse).uuid == "1"
        assert b.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="2"), PingResponse).uuid == "2"
        first.close()
        # The other transport's sockets (direct and through its I/O thread) keep working.
        assert b.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="3"), PingResponse).uuid == "3"
        pending = b.call_async(SERVER_UUID, "Test.Echo", PingResponse(uuid="4"), PingResponse)
        assert pending.result().uuid == "4"
    finally:
        first.close()
        second.close()
    # The last transport to close terminates the context; a new one starts a new context.
    assert first._ctx.closed == (others == 0)
    with Transport() as third:
        assert (third._ctx is first._ctx) == (others > 0)
        c = RpcClient(server.address, "c", transport=third)
        assert c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="5"), PingResponse).uuid == "5"


@pytest.mark.integration
def test_connection_lost_while_waiting_for_an_answer():
    # A synchronous call whose server dies after taking the request learns it from the
    # dropped connection, long before its deadline (TimedOut would mean it waited it out).
    port = free_port()
    proc = start_echo_process(port)
    outcome: dict[str, BaseException] = {}
    try:
        with RpcClient(f"127.0.0.1:{port}", "c") as c:

            def call() -> None:
                try:
                    c.call(SERVER_UUID, "Test.Sleep", PingResponse(uuid="60"), PingResponse,
                           timeout_s=60)  # fmt: skip
                except errors.RpcError as err:
                    outcome["error"] = err

            t = threading.Thread(target=call)
            t.start()
            assert proc.stdout.readline().strip() == "SLEEPING"  # the request is in a handler
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            t.join(30)
            assert not t.is_alive()
    finally:
        proc.kill()
        proc.wait(10)
    assert isinstance(outcome.get("error"), ConnectionLost), outcome


def test_io_thread_starts_with_the_first_call_through_it(server):
    with Transport() as transport:
        c = RpcClient(server.address, "c", transport=transport)
        assert c.call(SERVER_UUID, "Test.Echo", PingResponse(uuid="s"), PingResponse).uuid == "s"
        # Synchronous and pipelined calls use the caller's own socket.
        pending = c.call_async(SERVER_UUID, "Test.Echo", PingResponse(uuid="a"), PingResponse)
        assert pending.result().uuid == "a"
        assert transport._thread is None
        # A signed call goes through the I/O thread (Test.Echo does not check the tag).
        signed = RpcClient(server.address, "c", transport=transport, privileged_key=b"k" * 32)
        pending = signed.call_async(SERVER_UUID, "Test.Echo", PingResponse(uuid="b"), PingResponse)
        assert pending.result().uuid == "b"
        assert transport._thread is not None and transport._thread.is_alive()
    assert not transport._thread.is_alive()


@pytest.mark.integration
def test_drop_before_a_call_is_not_taken_for_a_drop_during_it():
    # The connection events of a server restart wait unread on the monitor (the fast path
    # never reads it); a later call slow enough to watch the monitor sees that old drop,
    # but the connection is up again, so the call goes on and gets its answer.
    port = free_port()
    proc = start_echo_process(port)
    try:
        with RpcClient(f"127.0.0.1:{port}", "c") as c:
            echo = PingResponse(uuid="1")
            assert c.call(SERVER_UUID, "Test.Echo", echo, PingResponse).uuid == "1"
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            proc = start_echo_process(port)
            # Wait for the reconnect without a call (a call's own slow send would read the
            # monitor): with IMMEDIATE the socket is writable only over a live connection.
            d = c._transport._direct_socket(c.address)
            wait_for(lambda: d.socket.poll(100, zmq.POLLOUT), 10, "reconnected")
            slow = c.call(SERVER_UUID, "Test.Sleep", PingResponse(uuid="0.3"), PingResponse,
                          timeout_s=10)  # fmt: skip
            assert slow.uuid == "awake"
    finally:
        proc.kill()
        proc.wait(10)


# -- one-way messages (RequestHeader.one_way) ------------------------------------------


def one_way_server() -> tuple[RpcServer, list]:
    """A server with a one-way method that records what it ran, and a two-way one."""
    got: list = []

    def note(request: PingResponse, ctx: CallContext) -> PingResponse:
        if request.uuid == "refuse":
            raise errors.InvalidName("not for me")
        got.append((request.uuid, ctx.caller_uuid, ctx.one_way))
        return PingResponse(uuid=request.uuid)

    srv = RpcServer(SERVER_UUID, service="oneway", workers=1)
    srv.register("Test.Note", PingResponse, note, inline=True, one_way=True)
    srv.register("Test.Echo", PingResponse, echo, inline=True)
    return srv, got


def connected_poster(transport: Transport, address: str) -> rpc_client.Poster:
    poster = rpc_client.Poster(transport, address, "poster-1", queue_max=64)
    # IMMEDIATE: nothing is queued until the connection is up (a post says so).
    wait_for(
        lambda: poster.post(
            SERVER_UUID, "Test.Note", PingResponse(uuid="hello").SerializeToString(), 5
        ),
        5,
        "poster connected",
    )
    return poster


def test_one_way_messages_run_their_handler_and_successes_get_no_answer():
    srv, got = one_way_server()
    with srv, Transport() as transport:
        poster = connected_poster(transport, srv.address)
        try:
            for i in range(20):
                body = PingResponse(uuid=f"m{i}").SerializeToString()
                assert poster.post(SERVER_UUID, "Test.Note", body, 5)
            wait_for(lambda: len(got) == 21, 5, "every message handled")
            assert got[1:] == [(f"m{i}", "poster-1", True) for i in range(20)]  # in order
            # Nothing came back on the socket: one-way messages are never answered.
            assert poster.socket.poll(200, zmq.POLLIN) == 0
        finally:
            poster.close()
        # The same method still answers ordinary calls.
        with RpcClient(srv.address, "c", transport=transport) as c:
            assert (
                c.call(SERVER_UUID, "Test.Note", PingResponse(uuid="x"), PingResponse).uuid == "x"
            )
    assert got[-1] == ("x", "c", False)


def test_one_way_messages_that_are_refused_are_answered_and_logged(caplog):
    srv, got = one_way_server()
    with srv, Transport() as transport:
        poster = connected_poster(transport, srv.address)
        try:
            body = PingResponse(uuid="y").SerializeToString()
            assert poster.post("someone-else", "Test.Note", body, 5)  # misaddressed
            assert poster.post(SERVER_UUID, "Test.Echo", body, 5)  # takes no one-way messages
            assert poster.post(SERVER_UUID, "Test.Nope", body, 5)  # unknown
            refuse = PingResponse(uuid="refuse").SerializeToString()
            assert poster.post(SERVER_UUID, "Test.Note", refuse, 5)  # the handler refuses
            assert poster.post(SERVER_UUID, "Test.Note", body, 5)
            wait_for(lambda: len(got) == 2, 5, "the last message handled")
            assert got[1] == ("y", "poster-1", True)  # none of the refused ones ran
            refused: list = []
            wait_for(lambda: refused.extend(poster.refusals()) or len(refused) >= 4, 5, "refusals")
            assert [type(e) for e in refused] == [
                errors.InvalidName,
                errors.BadRequest,
                errors.BadRequest,
                errors.InvalidName,
            ]
            assert "not someone-else" in refused[0].message
            assert "takes no one-way messages" in refused[1].message
            assert "not for me" in refused[3].message
            # Successes are never answered.
            assert poster.socket.poll(200, zmq.POLLIN) == 0 and poster.refusals() == []
        finally:
            poster.close()
    stats = srv.stats()
    assert stats["invalid_name"] == 1 and stats["bad_request"] == 2 and stats["errors"] == 1
    text = caplog.text
    assert "rejected a one-way message" in text and "takes no one-way messages" in text
    assert "not for me" in text  # the handler's refusal is logged at warning


def test_post_to_a_server_that_is_not_there_is_not_queued():
    with Transport() as transport:
        poster = rpc_client.Poster(transport, f"127.0.0.1:{free_port()}", "p", queue_max=2)
        try:
            body = PingResponse(uuid="z").SerializeToString()
            assert not poster.post(SERVER_UUID, "Test.Note", body, 5)
            with pytest.raises(errors.BadRequest, match="exceeds the limit"):
                poster.post(SERVER_UUID, "Test.Note", b"x" * (transport.message_bytes_max + 1), 5)
        finally:
            poster.close()


def test_one_way_methods_must_run_inline():
    srv = RpcServer(SERVER_UUID, service="x")
    with pytest.raises(AssertionError, match="inline"):
        srv.register("Test.Note", PingResponse, echo, one_way=True)
    srv.close()


def test_posts_to_a_peer_that_does_not_read_are_bounded():
    """A peer that stops reading: once the kernel's buffers and `queue_max` messages are
    full, posts are refused at once (the caller never blocks, memory stays bounded)."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.RCVHWM, 1)
    port = free_port()
    router.bind(f"tcp://127.0.0.1:{port}")
    try:
        with Transport() as transport:
            poster = rpc_client.Poster(transport, f"127.0.0.1:{port}", "p", queue_max=2)
            try:
                body = b"x" * (1 << 20)
                wait_for(lambda: poster.post(SERVER_UUID, "Test.Note", body, 5), 5, "connected")
                accepted = sum(poster.post(SERVER_UUID, "Test.Note", body, 5) for _ in range(300))
                assert accepted < 300, accepted  # 300 MiB never fit: refused, not blocked
            finally:
                poster.close()
    finally:
        router.close()
        ctx.term()


def test_a_transport_closed_before_its_poster_does_not_hang(caplog):
    srv, _ = one_way_server()
    with srv:
        transport = Transport()
        poster = connected_poster(transport, srv.address)
        transport.close(timeout_s=1)  # the poster's owner never closed it
        assert "one-way sockets were not closed by their owners" in caplog.text
        poster.close()
