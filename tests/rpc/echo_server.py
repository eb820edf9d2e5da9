"""A tiny rpc server process for tests: `python -m tests.rpc.echo_server UUID HOST:PORT`.

Methods: Test.Echo returns the request's fields and echoes sidecars back. It prints
"READY <address>" once serving and stops on SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading

from rpc.rpc_pb2 import PingResponse
from rpc.server import CallContext, Reply, RpcServer


def echo(request: PingResponse, ctx: CallContext) -> Reply:
    return Reply(PingResponse(uuid=request.uuid, service=ctx.caller_uuid), list(ctx.sidecars))


def main() -> None:
    uuid, bind = sys.argv[1], sys.argv[2]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = RpcServer(uuid, bind, service="echo")
    server.register("Test.Echo", PingResponse, echo)
    server.register("Test.EchoInline", PingResponse, echo, inline=True)
    with server:
        print(f"READY {server.address}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
