"""A CURVE rpc server process for tests:
`python -m tests.rpc.curve_echo_server UUID HOST:PORT KEY_DIR ADMITTED_FILE`.

Its key pair is `server` in KEY_DIR (made on first start; a secret file others may read
stops it with the key loader's message). ADMITTED_FILE holds one `<public key> <principal>`
per line: the keys its authorizer admits. Methods: Test.Echo answers the request's `uuid`,
the caller's key as the handshake proved it (`service`) and its principal (`methods`), and
echoes sidecars; Test.Handled answers how many Test.Echo handlers ran and how many requests
the server read (`methods` = [handled, requests]). Prints "READY <address> <public key>" once
serving and stops on SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import threading

from rpc.keys import KeyFileError, ServerCurve, load_or_create_keypair
from rpc.rpc_pb2 import PingResponse
from rpc.server import CallContext, Reply, RpcServer


def main() -> None:
    uuid, bind, key_dir, admitted_file = sys.argv[1:5]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        keypair = load_or_create_keypair(key_dir, "server")
    except KeyFileError as exc:
        print(f"cannot start: {exc}", file=sys.stderr, flush=True)
        sys.exit(2)
    admitted = {}
    with open(admitted_file) as f:
        for line in f:
            if line.strip():
                key, principal = line.split()
                admitted[key] = principal
    handled = [0]

    def echo(request: PingResponse, ctx: CallContext) -> Reply:
        handled[0] += 1
        answer = PingResponse(uuid=request.uuid, service=ctx.peer_key, methods=[ctx.principal])
        return Reply(answer, list(ctx.sidecars))

    server = RpcServer(uuid, bind, service="curve-echo", curve=ServerCurve(keypair, admitted.get))

    def count(_request: PingResponse, _ctx: CallContext) -> PingResponse:
        return PingResponse(methods=[str(handled[0]), str(server.stats()["requests"])])

    server.register("Test.Echo", PingResponse, echo)
    server.register("Test.Handled", PingResponse, count, inline=True)
    with server:
        print(f"READY {server.address} {keypair.public}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
