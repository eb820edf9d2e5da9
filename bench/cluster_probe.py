"""What the benches ask a local cluster's tablet servers: their tablets (ListTablets) and
which tablets serve (RUNNING on the restarted servers, with a leader somewhere). Shared by
bench/tserver_startup.py and bench/scale.py (bench/ is first on sys.path when they run)."""

from __future__ import annotations

from optools.localcluster import LocalCluster
from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import ListTabletsRequest, ListTabletsResponse


def list_tablets(address: str, timeout_s: float = 2.0) -> ListTabletsResponse | None:
    """The server's replicas, brief (id, status, role, term, leader: what the benches read).
    A full listing of 10,000 replicas costs the server 180-190 ms of CPU; polled ten times a
    second it took 60% of a core from the restart being measured (session 21)."""
    try:
        with RpcClient(address, "bench") as rc:
            uuid = rc.ping(timeout_s=timeout_s).uuid
            return rc.call(
                uuid, "TServer.ListTablets", ListTabletsRequest(brief=True), ListTabletsResponse,
                timeout_s=timeout_s,
            )  # fmt: skip
    except errors.RpcError:
        return None


def serving(cluster: LocalCluster, victims: list[str], tablet_ids: set[str]) -> set[str] | None:
    """Tablets RUNNING on every victim (the restarted servers) with a leader somewhere; None
    while a victim does not answer ListTablets."""
    running: dict[str, set[str]] = {}
    led: set[str] = set()
    for node in cluster.spec.tservers:
        resp = list_tablets(node.rpc)
        if resp is None:
            if node.rpc in victims:
                return None
            continue
        ok = {t.tablet_id for t in resp.tablets if t.status == "RUNNING"}
        running[node.rpc] = ok
        led |= {t.tablet_id for t in resp.tablets if t.status == "RUNNING" and t.role == "LEADER"}
    out = set(tablet_ids) & led
    for v in victims:
        out &= running[v]
    return out
