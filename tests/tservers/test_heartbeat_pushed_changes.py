"""The heartbeat's full scan of every replica is rare (issue 28: at 10,000 replicas the scan
every 30 s was most of an idle server's heartbeat thread): what changes a replica's report
without a Raft driver event is named by the tablet manager (a copy that began, failed or
whose failure expired, a tablet failed by its apply), so it reaches the coordinator in the
next beats without a scan. The heartbeater's clock is a fake one here (no scan falls due by
itself); a plaintext rpc server in this process stands for the coordinator node."""

from __future__ import annotations

import types

import pytest

from rpc.errors import TabletFailed
from rpc.protocols import coordinator_pb2 as cpb
from rpc.protocols.tserver_pb2 import OpType, TabletReportPB
from rpc.server import RpcServer
from tests.support.procs import wait_for
from tests.tservers.helpers import create, deadline, ipc, six_rows
from tservers import heartbeat
from tservers.fs import FsLayout
from tservers.heartbeat import Heartbeater
from tservers.tablet import manager as manager_mod
from tservers.tablet.manager import TabletManager
from tservers.wal.log import WalOptions

WAIT_S = 60.0  # a bound for what the maintenance thread does, far above what it takes


class Clock:
    """The heartbeat module's `time`: monotonic() is what the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(heartbeat, "time", types.SimpleNamespace(monotonic=c.monotonic))
    return c


@pytest.fixture
def node():
    """A coordinator node recording each heartbeat."""
    got: list[cpb.HeartbeatRequest] = []

    def beat(req: cpb.HeartbeatRequest, ctx) -> cpb.HeartbeatResponse:
        got.append(req)
        return cpb.HeartbeatResponse(is_leader=True)

    server = RpcServer("coordinator-0", service="coordinator")
    server.register("Coordinator.Heartbeat", cpb.HeartbeatRequest, beat, inline=True)
    with server:
        yield server, got


def _by_id(req: cpb.HeartbeatRequest) -> dict[str, cpb.TabletReport]:
    return {r.tablet_id: r for r in req.tablets}


def test_idle_replicas_are_not_reported_again_over_minutes(node, clock):
    """Over a fake 2 minutes of beats, with one replica named changed every 10 s, the reports
    built are those of the changed replicas only (the old 30 s scan built every one)."""
    server, got = node
    reps = {
        f"t{i}": TabletReportPB(tablet_id=f"t{i}", status="RUNNING", role="FOLLOWER")
        for i in range(300)
    }
    named: set[str] = set()

    def reports(ids):
        ids = reps.keys() if ids is None else ids
        return [reps[t] for t in ids if t in reps]

    def changes() -> set[str]:
        out = set(named)
        named.clear()
        return out

    hb = Heartbeater("ts-0", lambda: "127.0.0.1:1", reports, [server.address], changes=changes)
    try:
        hb.beat_once()
        assert not got[-1].incremental and len(got[-1].tablets) == len(reps)
        built, scans = hb.reports_built, hb.scans
        changed = 0
        for beat in range(240):  # 2 minutes of 0.5 s beats
            clock.now += 0.5
            if beat % 20 == 0:
                t = f"t{beat % len(reps)}"
                reps[t].current_term += 1
                named.add(t)
                changed += 1
            hb.beat_once()
            assert got[-1].incremental
        assert hb.scans == scans
        assert hb.reports_built - built <= changed * (heartbeat.RECHECK_BEATS + 1), (
            hb.reports_built - built,
            changed,
        )
        # The backstop scan still runs, at SCAN_INTERVAL_S.
        clock.now += heartbeat.SCAN_INTERVAL_S
        hb.beat_once()
        assert hb.scans == scans + 1
    finally:
        hb.close()


@pytest.fixture
def wired(tmp_path, node, clock, monkeypatch):
    """A tablet manager with a few idle tablets and a heartbeater wired as tservers/server.py
    wires it, settled: its beats send nothing."""
    monkeypatch.setattr(manager_mod, "MAINTENANCE_INTERVAL_S", 0.02)
    server, got = node
    m = TabletManager(FsLayout.format(tmp_path / "root"), WalOptions(), maintenance=True)
    m.open()
    hb = None
    try:
        tablets = [create(m, f"t{i}") for i in range(5)]
        hb = Heartbeater(
            m.fs.uuid,
            lambda: "127.0.0.1:1",
            lambda ids: m.reports(starting=False, tablet_ids=ids),
            [server.address],
            changes=m.driver.take_report_changes,
        )

        def settled() -> bool:
            hb.beat_once()
            return not got[-1].tablets and hb.beats > heartbeat.RECHECK_BEATS

        wait_for(settled, WAIT_S, "the heartbeat's reports to settle")
        yield m, hb, got, tablets
    finally:
        if hb is not None:
            hb.close()
        m.close()


def test_a_copy_failure_and_its_expiry_reach_the_coordinator_without_a_scan(wired):
    m, hb, got, _ = wired
    scans = hb.scans
    m.abort_copy("tcopy", "injected: the source went away")
    hb.beat_once()
    sent = _by_id(got[-1])
    assert got[-1].incremental and set(sent) == {"tcopy"}, sent
    assert sent["tcopy"].role == manager_mod.COPY_FAILED

    # COPY_FAILED_REPORT_S later (the failure's time set back): the report is gone.
    at, why = m._copy_failures["tcopy"]
    m._copy_failures["tcopy"] = (at - manager_mod.COPY_FAILED_REPORT_S, why)

    def gone() -> bool:
        hb.beat_once()
        return "tcopy" in got[-1].vanished_tablet_ids

    wait_for(gone, WAIT_S, "the expired copy failure to be named gone")
    assert hb.scans == scans


def test_a_copy_beginning_reaches_the_coordinator_without_a_scan(wired):
    m, hb, got, _ = wired
    scans = hb.scans
    m.begin_copy("tnew")
    hb.beat_once()
    sent = _by_id(got[-1])
    assert set(sent) == {"tnew"} and sent["tnew"].data_state == "COPYING", sent
    m.abort_copy("tnew", "injected")

    def failed() -> bool:
        hb.beat_once()
        r = _by_id(got[-1]).get("tnew")
        return r is not None and r.role == manager_mod.COPY_FAILED

    wait_for(failed, WAIT_S, "the failed copy's report")
    assert hb.scans == scans


def test_a_tablet_failed_by_its_apply_reaches_the_coordinator_without_a_scan(wired, monkeypatch):
    m, hb, got, tablets = wired
    scans = hb.scans
    t = tablets[2]

    def broken(e, w, op):
        raise RuntimeError("injected apply failure")

    monkeypatch.setattr(t, "_apply_write_rows_locked", broken)
    with pytest.raises(TabletFailed):
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(3))))], deadline())
    hb.beat_once()
    sent = _by_id(got[-1])
    assert "t2" in sent and sent["t2"].role == "FAILED", sent
    assert hb.scans == scans
