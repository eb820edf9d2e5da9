"""A tiny rpc server process for tests: `python -m tests.rpc.echo_server UUID HOST:PORT`.

Methods: Test.Echo returns the request's fields and echoes sidecars back (Test.EchoInline
the same on the I/O thread); Test.Sleep prints "SLEEPING" and answers after the number of
seconds in the request's `uuid` field. It prints "READY <address>" once serving and stops
on SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from rpc.rpc_pb2 import PingResponse
from rpc.server import CallContext, Reply, RpcServer


def echo(request: PingResponse, ctx: CallContext) -> Reply:
    return Reply(PingResponse(uuid=request.uuid, service=ctx.caller_uuid), list(ctx.sidecars))


def sleep(request: PingResponse, ctx: CallContext) -> PingResponse:
    print("SLEEPING", flush=True)
    time.sleep(min(float(request.uuid or 0), ctx.remaining_s()))
    return PingResponse(uuid="awake")


def main() -> None:
    uuid, bind = sys.argv[1], sys.argv[2]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = RpcServer(uuid, bind, service="echo")
    server.register("Test.Echo", PingResponse, echo)
    server.register("Test.EchoInline", PingResponse, echo, inline=True)
    server.register("Test.Sleep", PingResponse, sleep)
    with server:
        print(f"READY {server.address}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
