"""A tablet server's heartbeats refused at the CURVE handshake while its key waits to be
admitted: INFO, not WARNING, for the admission window; a WARNING once still refused after
it (tservers/heartbeat.py, issue 24).

`local-cluster up` starts a secure tablet server and then logs its principal: its first
heartbeats to every coordinator are refused, and each node's refusal was a WARNING. Real
sockets: a CURVE rpc server in this process stands for a coordinator node, refusing the
server's key until the test admits it.
"""

from __future__ import annotations

import logging

from rpc import handshakes
from rpc.keys import ClientCurve, KeyPair, ServerCurve
from rpc.protocols import coordinator_pb2 as cpb
from rpc.server import RpcServer
from tservers.heartbeat import Heartbeater


def _refusals(caplog, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "tservers.heartbeat" and r.levelno == level and "refused" in r.getMessage()
    ]


def test_refusals_in_the_admission_window_are_info_then_one_warning(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="tservers.heartbeat")
    tserver, node_key = KeyPair.generate(), KeyPair.generate()
    admitted: set[str] = set()
    beats: list[str] = []

    def heartbeat(req: cpb.HeartbeatRequest, ctx) -> cpb.HeartbeatResponse:
        beats.append(req.server_uuid)
        return cpb.HeartbeatResponse()

    node = RpcServer(
        "coordinator-0",
        service="coordinator",
        curve=ServerCurve(node_key, lambda key: "ts" if key in admitted else None),
    )
    node.register("Coordinator.Heartbeat", cpb.HeartbeatRequest, heartbeat, inline=True)
    with node:
        hb = Heartbeater(
            "ts-0",
            lambda: "127.0.0.1:1",
            lambda _ids: [],
            [node.address],
            curve=ClientCurve(tserver),
            coordinator_keys=[node_key.public],
        )
        try:
            for _ in range(3):  # refused, within the window: one INFO line
                hb.beat_once()
            assert _refusals(caplog, logging.WARNING) == []
            info = _refusals(caplog, logging.INFO)
            assert len(info) == 1 and "expected until this server's key is admitted" in info[0]
            monkeypatch.setattr(handshakes, "ADMISSION_WINDOW_S", 0.0)  # the window is over
            for _ in range(3):  # still refused: one WARNING, not one per beat
                hb.beat_once()
            assert len(_refusals(caplog, logging.WARNING)) == 1
            admitted.add(tserver.public)
            hb.beat_once()
            assert beats == ["ts-0"]
        finally:
            hb.close()
