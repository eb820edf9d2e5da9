"""Deferred answers (RpcServer.register(..., deferred=True), CallContext.later()) and pipelined
calls on the caller's own socket, over real zmq sockets on 127.0.0.1."""

from __future__ import annotations

import queue
import threading

import pytest

from rpc import errors
from rpc.client import ConnectionLost, RpcClient, Transport
from rpc.rpc_pb2 import PingResponse
from rpc.server import CallContext, Later, Reply, RpcServer
from tests.support.procs import free_port, wait_for

UUID = "deferred-test-server"


@pytest.fixture
def deferred_server():
    """Test.Later: answered by a thread of the test (`srv.laters` gets each Later with its
    request); Test.Now: answers inside the handler through its Later; Test.Raise: raises
    after taking a Later; Test.Pool: finished on the worker pool (Later.run)."""
    srv = RpcServer(UUID, "127.0.0.1:0", service="deferred", workers=2, queue_max=4)
    laters: queue.Queue = queue.Queue()

    def later(request: PingResponse, ctx: CallContext) -> Later:
        handle = ctx.later()
        laters.put((request, handle))
        return handle

    def now(request: PingResponse, ctx: CallContext) -> Later:
        handle = ctx.later()
        assert handle.reply(PingResponse(uuid=request.uuid))
        assert not handle.reply(PingResponse(uuid="twice"))  # answered once only
        return handle

    def raises(request: PingResponse, ctx: CallContext) -> Later:
        ctx.later()
        raise errors.NotFound("no such thing")

    def pool(request: PingResponse, ctx: CallContext) -> Later:
        handle = ctx.later()
        worker: list[str] = []

        def on_worker() -> Reply:
            worker.append(threading.current_thread().name)
            if request.uuid == "fail":
                raise errors.Unavailable("not now")
            return Reply(PingResponse(uuid=worker[0]), [b"side"])

        handle.run(on_worker)
        return handle

    srv.register("Test.Later", PingResponse, later, inline=True, deferred=True)
    srv.register("Test.Now", PingResponse, now, inline=True, deferred=True)
    srv.register("Test.Raise", PingResponse, raises, inline=True, deferred=True)
    srv.register("Test.Pool", PingResponse, pool, inline=True, deferred=True)
    srv.laters = laters
    with srv:
        yield srv


def test_a_deferred_call_is_answered_from_another_thread(deferred_server):
    with RpcClient(deferred_server.address, "c") as c:
        pending = [
            c.call_async(UUID, "Test.Later", PingResponse(uuid=str(i)), PingResponse)
            for i in range(3)
        ]
        handles = [deferred_server.laters.get(timeout=10) for _ in range(3)]
        assert deferred_server.stats()["inflight"] == 3  # no worker holds any of them
        answers: list[bool] = []
        threading.Thread(
            target=lambda: answers.extend(
                [
                    handles[2][1].reply(PingResponse(uuid="two")),
                    handles[0][1].fail(errors.NotLeader("ask another")),
                    handles[1][1].reply(PingResponse(uuid="one")),
                    handles[1][1].fail(errors.NotFound("too late")),  # answered already
                ]
            )
        ).start()
        with pytest.raises(errors.NotLeader, match="ask another"):
            pending[0].result()
        assert pending[1].result().uuid == "one"
        assert pending[2].result().uuid == "two"
        assert answers == [True, True, True, False]
        wait_for(
            lambda: deferred_server.stats()["inflight"] == 0, timeout_s=10, what="nothing in flight"
        )
        stats = deferred_server.method_stats()
        assert stats["Test.Later"][0] == {"OK": 2, "NOT_LEADER": 1}


def test_a_deferred_call_answered_at_once_or_failing_in_its_handler(deferred_server):
    with RpcClient(deferred_server.address, "c") as c:
        assert c.call(UUID, "Test.Now", PingResponse(uuid="n"), PingResponse).uuid == "n"
        with pytest.raises(errors.NotFound, match="no such thing"):
            c.call(UUID, "Test.Raise", PingResponse(), PingResponse)
    assert deferred_server.stats()["inflight"] == 0


def test_a_deferred_call_finished_on_the_pool(deferred_server):
    with RpcClient(deferred_server.address, "c") as c:
        answer, sidecars = c.call_with_sidecars(UUID, "Test.Pool", PingResponse(), PingResponse)
        assert answer.uuid.startswith("rpc-deferred-worker-")
        assert [bytes(s) for s in sidecars] == [b"side"]
        with pytest.raises(errors.Unavailable, match="not now"):
            c.call(UUID, "Test.Pool", PingResponse(uuid="fail"), PingResponse)
    wait_for(
        lambda: deferred_server.stats()["inflight"] == 0, timeout_s=10, what="nothing in flight"
    )


def test_an_unanswered_deferred_call_times_out_and_leaves_the_count(deferred_server):
    with RpcClient(deferred_server.address, "c") as c:
        pending = c.call_async(UUID, "Test.Later", PingResponse(), PingResponse, timeout_s=0.3)
        _request, handle = deferred_server.laters.get(timeout=10)
        with pytest.raises(errors.TimedOut):
            pending.result()
        # The server answers TIMED_OUT at the deadline and counts the call out; a late
        # answer is dropped.
        wait_for(lambda: deferred_server.stats()["timed_out"] == 1, timeout_s=10, what="the expiry")
        assert deferred_server.stats()["inflight"] == 0
        assert not handle.reply(PingResponse(uuid="late"))
        assert c.call(UUID, "Test.Now", PingResponse(uuid="next"), PingResponse).uuid == "next"


def test_deferred_calls_count_against_the_limit(deferred_server):
    # workers 2 + queue_max 4: six unanswered deferred calls, then THROTTLED.
    with RpcClient(deferred_server.address, "c") as c:
        pending = [
            c.call_async(UUID, "Test.Later", PingResponse(uuid=str(i)), PingResponse)
            for i in range(7)
        ]
        handles = [deferred_server.laters.get(timeout=10) for _ in range(6)]
        with pytest.raises(errors.Throttled):
            pending[6].result()
        for request, handle in handles:
            handle.reply(PingResponse(uuid=request.uuid))
        assert [p.result().uuid for p in pending[:6]] == [str(i) for i in range(6)]
    assert deferred_server.stats()["throttled"] == 1


def test_pipelined_calls_interleave_with_synchronous_ones_on_one_socket():
    # Pipelined calls go on the caller's own socket, as synchronous ones: an answer read
    # while another call is waited for is kept for its pending call, in any order.
    srv = RpcServer(UUID, "127.0.0.1:0", service="mixed", workers=8)
    release = threading.Event()

    def echo(request: PingResponse, ctx: CallContext) -> PingResponse:
        if request.uuid.startswith("slow"):
            release.wait(30)
        return PingResponse(uuid=request.uuid)

    srv.register("Test.Echo", PingResponse, echo)
    with srv, Transport() as transport:
        c = RpcClient(srv.address, "c", transport=transport)
        slow = c.call_async(UUID, "Test.Echo", PingResponse(uuid="slow"), PingResponse)
        fast = [
            c.call_async(UUID, "Test.Echo", PingResponse(uuid=str(i)), PingResponse)
            for i in range(20)
        ]
        assert c.call(UUID, "Test.Echo", PingResponse(uuid="sync"), PingResponse).uuid == "sync"
        assert fast[-1].result().uuid == "19"
        # Answers read while others were waited for are kept; done() reads without waiting.
        wait_for(lambda: all(p.done() for p in fast), timeout_s=10, what="every answer")
        release.set()
        assert slow.result().uuid == "slow"
        assert [p.result().uuid for p in fast[:-1]] == [str(i) for i in range(19)]
        assert transport._thread is None  # no call needed the I/O thread

        # Collected by another thread: a programming error, said at once.
        other = c.call_async(UUID, "Test.Echo", PingResponse(uuid="x"), PingResponse)
        failure: list[BaseException] = []

        def collect() -> None:
            try:
                other.result()
            except AssertionError as exc:
                failure.append(exc)

        t = threading.Thread(target=collect)
        t.start()
        t.join(10)
        assert failure and "thread that made it" in str(failure[0])
        assert other.result().uuid == "x"


def test_pipelined_calls_learn_of_a_lost_connection():
    port = free_port()
    srv = RpcServer(UUID, f"127.0.0.1:{port}", service="lost", workers=2)
    started = threading.Event()

    def hang(request: PingResponse, ctx: CallContext) -> PingResponse:
        started.set()
        ctx_wait = threading.Event()
        ctx_wait.wait(ctx.remaining_s())
        return request

    srv.register("Test.Hang", PingResponse, hang)
    srv.start()
    try:
        with RpcClient(srv.address, "c") as c:
            pending = [
                c.call_async(UUID, "Test.Hang", PingResponse(), PingResponse, timeout_s=60)
                for _ in range(2)
            ]
            assert started.wait(10)
            srv.close(timeout_s=0.5)  # the connection drops; the calls were written
            for p in pending:
                with pytest.raises(ConnectionLost):
                    p.result()
    finally:
        srv.close()
