"""A Poster (one-way messages: the tablet servers' Raft traffic) whose CURVE handshake was
refused once reaches the server once it admits the key.

libzmq ends a connection whose handshake failed for authentication (ZAP refused the key)
and never connects it again. A tablet server started again refuses its peers' keys until
its first heartbeat answer brings the principals table, so a peer's poster refused in that
window stayed dead: no Raft message reached the restarted server again, and a tablet of two
live replicas stayed leaderless (nemesis test_power_loss_during_a_tablet_copy, secure:
PRE_CANDIDATE for 120 s). Real sockets: a CURVE rpc server in this process.
"""

from __future__ import annotations

import threading
import time

from rpc import client as rpc_client
from rpc.keys import ClientCurve, KeyPair, ServerCurve
from rpc.rpc_pb2 import PingResponse
from rpc.server import RpcServer

WAIT_S = 10.0


def test_a_refused_poster_reaches_the_server_once_it_admits_the_key() -> None:
    caller, server_key = KeyPair.generate(), KeyPair.generate()
    admitted: set[str] = set()
    refused: list[str] = []
    received: list[str] = []
    seen = threading.Event()

    def authorize(key: str) -> str | None:
        if key in admitted:
            return "peer"
        refused.append(key)
        return None

    def one_way(req: PingResponse, ctx) -> PingResponse:
        received.append(req.uuid)
        seen.set()
        return req

    server = RpcServer(
        "node-a",
        service="test",
        curve=ServerCurve(server_key, authorize),
    )
    server.register("Test.Note", PingResponse, one_way, inline=True, one_way=True)
    with server:
        transport = rpc_client.Transport(
            curve=ClientCurve(caller, server_keys={"node-a": server_key.public})
        )
        poster = rpc_client.Poster(transport, server.address, "caller", recipient_uuid="node-a")
        try:
            # Refused at the handshake: nothing reaches the server.
            deadline = time.monotonic() + WAIT_S
            early = PingResponse(uuid="early").SerializeToString()
            while not refused:
                poster.post("node-a", "Test.Note", early, 5.0)
                assert time.monotonic() < deadline, "the handshake was never refused"
                time.sleep(0.05)
            time.sleep(0.3)  # the refusal is in: libzmq has ended that connection
            assert received == []

            admitted.add(caller.public)  # as the peer's principals table arrives
            late = PingResponse(uuid="late").SerializeToString()
            deadline = time.monotonic() + WAIT_S
            while not seen.is_set():
                assert time.monotonic() < deadline, (
                    f"nothing reached the server {WAIT_S:.0f}s after it admitted the key"
                )
                poster.post("node-a", "Test.Note", late, 5.0)
                time.sleep(0.05)
            assert "late" in received and poster.reopened >= 1
        finally:
            poster.close()
            transport.close()
