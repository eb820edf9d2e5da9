"""Tablet-server calls retry for the client's whole timeout, not a fixed short count; each
attempt at one server gives it a patience: how long it may stay silent before the next
replica (or coordinator node) is asked.

Seen in the suite: a scan right after CreateTable gave up UNAVAILABLE (8 attempts, 1.6 s of
pauses) 1.7 s after the tablet was created, just before its first leader was elected.
Seen by a tester: a SIGSTOPped leader (its connection up) took each call's whole timeout,
30 s, although a new leader had been known for seconds (tests/client/test_hung_leader.py).
"""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from logcentric.client import (
    ATTEMPT_TIMEOUT_MIN_S,
    TSERVER_ATTEMPTS_MAX,
    _attempt_timeouts,
    _attempts,
)
from logcentric.meta import (
    PATIENCE_INITIAL_S,
    PATIENCE_MAX_S,
    SilenceWatch,
    attempt_patience_s,
)
from rpc import errors
from rpc.client import RpcClient
from rpc.rpc_pb2 import PingResponse
from rpc.server import RpcServer
from tests.support.procs import free_port


def test_a_timeout_of_zero_still_retries_once():
    assert len(list(_attempts(0.0))) == 2


def test_attempts_go_on_until_the_timeout_has_passed():
    t0 = time.monotonic()
    seen = list(_attempts(2.5))
    t1 = time.monotonic()
    elapsed = t1 - t0
    # The retry window covers a first election (up to two 1 s election timeouts)...
    assert elapsed >= 2.5
    # ...with backoff pauses, not a busy loop, and never beyond the cap; every round is
    # given the same deadline, the call's.
    assert 2 < len(seen) < TSERVER_ATTEMPTS_MAX
    assert len(set(seen)) == 1 and t0 + 2.5 <= seen[0] <= t1 + 2.5


def test_the_patience_starts_short_and_doubles_each_round_to_a_cap():
    schedule = [attempt_patience_s(n) for n in range(8)]
    assert schedule == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0]
    assert schedule[0] == PATIENCE_INITIAL_S and max(schedule) == PATIENCE_MAX_S
    assert attempt_patience_s(10_000) == PATIENCE_MAX_S  # no overflow, however many rounds


def test_an_attempt_may_work_until_the_deadline_but_be_silent_only_its_patience():
    deadline = 100.0
    # Early in the call: the whole rest of the deadline to work (a large write, a slow
    # scan batch is not cut), the round's patience to say something.
    assert _attempt_timeouts(deadline, 0, now=80.0) == (20.0, 1.0)
    assert _attempt_timeouts(deadline, 1, now=80.0) == (20.0, 2.0)
    assert _attempt_timeouts(deadline, 9, now=80.0) == (20.0, PATIENCE_MAX_S)
    # Near the deadline: never a patience beyond it...
    assert _attempt_timeouts(deadline, 3, now=99.0) == (1.0, 1.0)
    # ...and past it (the second round always runs) the shortest attempt.
    past = _attempt_timeouts(deadline, 1, now=130.0)
    assert past == (ATTEMPT_TIMEOUT_MIN_S, ATTEMPT_TIMEOUT_MIN_S)
    for round_ in range(12):
        for now in (0.0, 50.0, 95.0, 99.9, 100.0, 500.0):
            timeout_s, patience_s = _attempt_timeouts(deadline, round_, now)
            assert 0 < patience_s <= timeout_s
            assert timeout_s == max(ATTEMPT_TIMEOUT_MIN_S, deadline - now)
            assert patience_s <= attempt_patience_s(round_)


class _Silent:
    """A server that accepts connections and requests and never answers anything, not even
    a ping: a hung process whose connection stays up, as far as a client can tell (zmq's own
    I/O thread completes the handshake; nobody reads)."""

    def __init__(self) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.bind(f"tcp://{self.address}")

    def __enter__(self) -> _Silent:
        return self

    def __exit__(self, *exc) -> None:
        self._sock.close(linger=0)
        self._ctx.term()


def _echo_server(delay_s: float, calls: list) -> RpcServer:
    server = RpcServer("node-a", service="test", workers=2)

    def echo(req: PingResponse, ctx) -> PingResponse:
        calls.append(req.uuid)
        time.sleep(delay_s)
        return req

    server.register("Test.Echo", PingResponse, echo)
    return server


def test_a_silent_server_is_given_up_after_its_patience_not_the_timeout():
    """The call is ended by the watch's verdict (TIMED_OUT saying the server is silent), not
    by its 60 s timeout; the owner is asked once to stop using the rpc client."""
    watch = SilenceWatch("test-watch")
    detached: list[RpcClient] = []

    def detach(rpc: RpcClient) -> bool:
        detached.append(rpc)
        return True

    with _Silent() as silent:
        rpc = RpcClient(silent.address, "caller")
        try:
            with pytest.raises(errors.TimedOut, match="hung or cut off") as info:
                watch.call(
                    lambda: rpc,
                    detach,
                    "node-a",
                    "Test.Echo",
                    PingResponse(uuid="x"),
                    PingResponse,
                    timeout_s=60.0,
                    patience_s=0.2,
                    idempotent=True,  # a silent server is not retried, idempotent or not
                )
            assert "no answer within 0.2s" in str(info.value)
            assert detached == [rpc]
            assert watch.in_flight() == 0
        finally:
            rpc.close()
            watch.close()


def test_a_server_at_work_is_waited_for_however_long_past_its_patience():
    """A server that answers pings is alive: a call that takes six patiences (a large write,
    a slow scan batch) is not cut, nor sent twice."""
    calls: list[str] = []
    watch = SilenceWatch("test-watch")
    with _echo_server(1.2, calls) as server, RpcClient(server.address, "caller") as rpc:
        try:
            response, _ = watch.call(
                lambda: rpc,
                lambda r: pytest.fail("a live server was given up"),
                "node-a",
                "Test.Echo",
                PingResponse(uuid="slow"),
                PingResponse,
                timeout_s=30.0,
                patience_s=0.2,
            )
        finally:
            watch.close()
    assert response.uuid == "slow"
    assert calls == ["slow"]


def test_every_call_in_flight_to_a_silent_server_is_given_up_and_later_calls_reconnect():
    """Calls of several threads to one silent server all end with TIMED_OUT (its rpc client
    is closed once), and the next call goes through the owner's new client."""
    watch = SilenceWatch("test-watch")
    with _Silent() as silent:
        lock = threading.Lock()
        current = {"rpc": RpcClient(silent.address, "caller")}
        replaced: list[RpcClient] = []

        def detach(rpc: RpcClient) -> bool:
            with lock:
                if current["rpc"] is not rpc:
                    return False
                replaced.append(rpc)
                current["rpc"] = RpcClient(silent.address, "caller")
                return True

        outcomes: list[BaseException | None] = []

        def one_call() -> None:
            try:
                watch.call(
                    lambda: current["rpc"],
                    detach,
                    "node-a",
                    "Test.Echo",
                    PingResponse(uuid="x"),
                    PingResponse,
                    timeout_s=60.0,
                    patience_s=0.3,
                )
                outcomes.append(None)
            except errors.RpcError as err:
                outcomes.append(err)

        threads = [threading.Thread(target=one_call) for _ in range(3)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            assert len(outcomes) == 3
            assert all(isinstance(o, errors.TimedOut) for o in outcomes), outcomes
            assert all("hung or cut off" in str(o) for o in outcomes), outcomes
            assert len(replaced) >= 1 and current["rpc"] not in replaced
        finally:
            current["rpc"].close()
            for rpc in replaced:
                rpc.close()
            watch.close()
