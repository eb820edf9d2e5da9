"""What the benches ask a local cluster's tablet servers: their tablets (ListTablets) and
which tablets serve (RUNNING on the restarted servers, with a leader somewhere). Shared by
bench/tserver_startup.py and bench/scale.py (bench/ is first on sys.path when they run)."""

from __future__ import annotations

from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import ListTabletsRequest, ListTabletsResponse


def list_tablets(
    address: str, timeout_s: float = 2.0, *, not_serving_only: bool = False
) -> ListTabletsResponse | None:
    """The server's replicas, brief (id, status, role, term, leader: what the benches read).
    A full listing of 10,000 replicas costs the server 180-190 ms of CPU; polled ten times a
    second it took 60% of a core from the restart being measured (session 21)."""
    req = ListTabletsRequest(brief=True, not_serving_only=not_serving_only)
    try:
        with RpcClient(address, "bench") as rc:
            uuid = rc.ping(timeout_s=timeout_s).uuid
            return rc.call(
                uuid, "TServer.ListTablets", req, ListTabletsResponse, timeout_s=timeout_s
            )
    except errors.RpcError:
        return None


def serving(victims: list[str], tablet_ids: set[str]) -> set[str] | None:
    """Tablets RUNNING on every victim (the restarted servers) whose replica there knows
    its group's leader (itself when it leads); None while a victim does not answer
    ListTablets.

    A replica learns its leader only from that leader's own messages in its term, so this
    is "a leader somewhere" as the victim sees it. Only the victims are asked, and only for
    the replicas that do not serve (`not_serving_only`): listing every replica of every
    server (as before session 22) cost each ~40 ms of CPU a poll, a fifth of a restarting
    server's GIL at a poll every 0.2 s, taken from the restart being measured."""
    out = set(tablet_ids)
    for address in victims:
        resp = list_tablets(address, not_serving_only=True)
        if resp is None:
            return None
        if resp.replicas < len(tablet_ids):  # some are not on this victim: list them all
            resp = list_tablets(address)
            if resp is None:
                return None
            out &= {t.tablet_id for t in resp.tablets if t.status == "RUNNING" and t.leader_uuid}
        else:
            out -= {t.tablet_id for t in resp.tablets}
    return out
