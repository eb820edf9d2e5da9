"""Incremental tablet reports (issue 28, tservers/heartbeat.py): each coordinator node gets a
full report first and whenever it asks; then only what changed among the replicas the Raft
driver named (and rechecked for a few beats), what a failed call did not deliver, and every
replica's changes at each scan; an idle server builds no report at all. A plaintext rpc
server in this process stands for the coordinator nodes."""

from __future__ import annotations

import pytest

from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols.tserver_pb2 import TabletReportPB
from rpc.server import RpcServer
from tservers import heartbeat
from tservers.heartbeat import Heartbeater


class FakeServer:
    """The replicas' reports and the ids the driver says changed."""

    def __init__(self, n: int) -> None:
        self.replicas = {
            f"t{i}": TabletReportPB(tablet_id=f"t{i}", status="RUNNING", role="FOLLOWER")
            for i in range(n)
        }
        self.changed: set[str] = set()

    def reports(self, ids):
        ids = self.replicas.keys() if ids is None else ids
        return [self.replicas[t] for t in ids if t in self.replicas]

    def changes(self) -> set[str]:
        out, self.changed = self.changed, set()
        return out


@pytest.fixture
def node():
    """A coordinator node: records each heartbeat; `ask_full` makes it ask for a full one."""
    got: list[cpb.HeartbeatRequest] = []
    state = {"ask_full": False}

    def beat(req: cpb.HeartbeatRequest, ctx) -> cpb.HeartbeatResponse:
        got.append(req)
        return cpb.HeartbeatResponse(is_leader=True, needs_full_report=state["ask_full"])

    server = RpcServer("coordinator-0", service="coordinator")
    server.register("Coordinator.Heartbeat", cpb.HeartbeatRequest, beat, inline=True)
    with server:
        yield server, got, state


def _ids(req: cpb.HeartbeatRequest) -> set[str]:
    return {r.tablet_id for r in req.tablets}


def test_full_then_only_changes_and_nothing_when_idle(node):
    server, got, state = node
    ts = FakeServer(50)
    hb = Heartbeater("ts-0", lambda: "127.0.0.1:1", ts.reports, [server.address],
                     changes=ts.changes)  # fmt: skip
    try:
        hb.beat_once()
        assert not got[-1].incremental and _ids(got[-1]) == set(ts.replicas)
        built = hb.reports_built
        for _ in range(3):  # idle: nothing built, nothing sent
            hb.beat_once()
            assert got[-1].incremental and not got[-1].tablets
        assert hb.reports_built == built

        # A leader change the driver names: sent once, rechecked for a few beats (a state
        # settling just after the driver's event is seen), then nothing is built again.
        ts.replicas["t3"].role = "LEADER"
        ts.changed.add("t3")
        hb.beat_once()
        assert _ids(got[-1]) == {"t3"} and got[-1].tablets[0].role == "LEADER"
        ts.replicas["t3"].current_term = 2  # settles after the event, unnamed
        hb.beat_once()
        assert _ids(got[-1]) == {"t3"} and got[-1].tablets[0].term == 2
        for _ in range(heartbeat.RECHECK_BEATS):
            hb.beat_once()
            assert not got[-1].tablets
        built = hb.reports_built
        hb.beat_once()
        assert hb.reports_built == built

        # A replica gone (deleted): named gone once.
        del ts.replicas["t7"]
        ts.changed.add("t7")
        hb.beat_once()
        assert list(got[-1].vanished_tablet_ids) == ["t7"] and not got[-1].tablets
        hb.beat_once()
        assert not got[-1].vanished_tablet_ids

        # The node asks for a full report (restarted, or it started serving): it gets one.
        state["ask_full"] = True
        hb.beat_once()
        state["ask_full"] = False
        hb.beat_once()
        assert not got[-1].incremental and _ids(got[-1]) == set(ts.replicas)
        hb.beat_once()
        assert got[-1].incremental and not got[-1].tablets
    finally:
        hb.close()


def test_a_scan_sends_what_changed_without_the_driver(node, monkeypatch):
    server, got, _ = node
    ts = FakeServer(20)
    hb = Heartbeater("ts-0", lambda: "127.0.0.1:1", ts.reports, [server.address],
                     changes=ts.changes)  # fmt: skip
    try:
        hb.beat_once()
        ts.replicas["t5"].status = "FAILED"  # e.g. failed by its apply: no driver event
        ts.replicas["t9"] = TabletReportPB(tablet_id="t9", status="RUNNING", role="FOLLOWER")
        ts.replicas["t20"] = TabletReportPB(tablet_id="t20", status="RUNNING")  # new
        del ts.replicas["t1"]  # (t9 above: a new object, the same report: not sent)
        hb.beat_once()
        assert not got[-1].tablets and not got[-1].vanished_tablet_ids
        monkeypatch.setattr(heartbeat, "SCAN_INTERVAL_S", 0.0)
        hb.beat_once()
        assert got[-1].incremental
        assert _ids(got[-1]) == {"t5", "t20"} and list(got[-1].vanished_tablet_ids) == ["t1"]
    finally:
        hb.close()


def test_what_a_failed_call_did_not_deliver_is_sent_again(node):
    server, got, _ = node
    ts = FakeServer(5)
    dead = "127.0.0.1:1"  # nobody listens: every call to it fails
    hb = Heartbeater("ts-0", lambda: "127.0.0.1:1", ts.reports, [dead, server.address],
                     changes=ts.changes)  # fmt: skip
    try:
        hb.beat_once()
        assert not got[-1].incremental
        ts.replicas["t2"].role = "LEADER"
        ts.changed.add("t2")
        hb.beat_once()
        assert _ids(got[-1]) == {"t2"}
        # The dead node never answered: no full report is built for it beat after beat.
        for _ in range(heartbeat.RECHECK_BEATS + 1):
            hb.beat_once()
        built = hb.reports_built
        hb.beat_once()
        assert hb.reports_built == built
    finally:
        hb.close()
