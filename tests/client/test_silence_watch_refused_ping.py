"""The silence watch (logcentric/meta.py SilenceWatch) when a server refuses its ping.

A CURVE server that starts again refuses a key until it learns it (a tablet server, until
its first heartbeat answer brings the principals table): the watch's ping of a slow call
then fails at the handshake (HandshakeFailed, UNAUTHENTICATED). That is an answer, not
silence; and it must not end the watch's thread, which watches every later call of the
client (seen in the nemesis power runs: "Exception in thread client-silence-watch").
Real sockets: a CURVE rpc server in this process, a silent zmq ROUTER.
"""

from __future__ import annotations

import threading
import time

import pytest
import zmq

from logcentric.meta import SilenceWatch
from rpc import errors
from rpc.client import RpcClient
from rpc.keys import ClientCurve, KeyPair, ServerCurve
from rpc.rpc_pb2 import PingResponse
from rpc.server import RpcServer
from tests.support.procs import free_port

SLOW_CALL_S = 1.0
PATIENCE_S = 0.2


def test_a_refused_ping_is_an_answer_and_the_watch_goes_on() -> None:
    client_key, server_key = KeyPair.generate(), KeyPair.generate()
    admitted = {client_key.public}
    started = threading.Event()

    def slow_echo(req: PingResponse, ctx) -> PingResponse:
        # From now on the server refuses the client's key (as after a restart): the watch's
        # ping, on a connection of its own, fails at the handshake.
        admitted.clear()
        started.set()
        time.sleep(SLOW_CALL_S)
        return req

    server = RpcServer(
        "node-a",
        service="test",
        workers=2,
        curve=ServerCurve(server_key, lambda key: "caller" if key in admitted else None),
    )
    server.register("Test.Echo", PingResponse, slow_echo)
    watch = SilenceWatch("test-watch")
    try:
        with server:
            rpc = RpcClient(
                server.address, "caller", curve=ClientCurve(client_key),
                server_key=server_key.public,
            )  # fmt: skip
            with rpc:
                response, _ = watch.call(
                    lambda: rpc,
                    lambda r: pytest.fail("a server that answered was given up"),
                    "node-a",
                    "Test.Echo",
                    PingResponse(uuid="slow"),
                    PingResponse,
                    timeout_s=30.0,
                    patience_s=PATIENCE_S,
                )
        assert started.is_set() and response.uuid == "slow"

        # The watch still works: a call to a silent server is given up after its patience
        # (with the watch's thread gone, it would wait until its timeout instead).
        ctx = zmq.Context()
        silent = ctx.socket(zmq.ROUTER)
        silent.setsockopt(zmq.LINGER, 0)
        address = f"127.0.0.1:{free_port()}"
        silent.bind(f"tcp://{address}")
        try:
            with RpcClient(address, "caller") as quiet:
                with pytest.raises(errors.TimedOut, match="hung or cut off"):
                    watch.call(
                        lambda: quiet,
                        lambda r: True,
                        "node-b",
                        "Test.Echo",
                        PingResponse(uuid="x"),
                        PingResponse,
                        # Far above the patience: a loaded machine delays the watch's
                        # thread (5 s failed once in a CI run), and a dead thread would
                        # still show as this timeout's other message.
                        timeout_s=30.0,
                        patience_s=PATIENCE_S,
                    )
        finally:
            silent.close(linger=0)
            ctx.term()
    finally:
        watch.close()
