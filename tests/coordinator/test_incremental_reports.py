"""Incremental tablet reports at the coordinator (issue 28, tservers/heartbeat.py): a node asks
a tablet server for a full report until it took one; what a server's incremental report names
gone, or its full report leaves out, no longer counts as a stray or FAILED replica of it.
The engine of a one-node coordinator on an in-memory log (tests/coordinator/test_engine.py)."""

from __future__ import annotations

from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.test_engine import cluster, create, enlist  # noqa: F401 (the fixture)


def _beat(engine, *reports, incremental: bool = False, vanished=()) -> pb.HeartbeatResponse:
    return engine.heartbeat(
        pb.HeartbeatRequest(
            server_uuid="s0",
            address="127.0.0.1:1",
            tablets=list(reports),
            incremental=incremental,
            vanished_tablet_ids=list(vanished),
        )
    )


def _orphan(tablet_id: str, role: str = "FOLLOWER") -> pb.TabletReport:
    """A replica of a tablet the catalog does not know: a stray (deleted without a CAS)."""
    return pb.TabletReport(tablet_id=tablet_id, data_state="READY", role=role, term=1)


def test_a_full_report_is_asked_for_until_one_is_taken(cluster):  # noqa: F811
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    assert _beat(a.engine, incremental=True).needs_full_report
    assert _beat(a.engine, incremental=True).needs_full_report
    assert not _beat(a.engine).needs_full_report  # a full one (here: no replica)
    assert not _beat(a.engine, incremental=True).needs_full_report
    with a.catalog.lock:  # what the replication policy does when serving starts or stops
        a.catalog.full_reports.clear()
    assert _beat(a.engine, incremental=True).needs_full_report


def test_gone_replicas_are_no_longer_strays_or_failed(cluster):  # noqa: F811
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    _beat(a.engine, _orphan("x1"), _orphan("x2"), _orphan("x3", role="FAILED"))
    assert {("s0", "x1"), ("s0", "x2"), ("s0", "x3")} <= set(a.catalog.strays)
    assert a.catalog.failed_replicas["x3"] == {"s0"}

    # Incremental: one unchanged (not sent) stays noted; one named gone is forgotten.
    _beat(a.engine, incremental=True, vanished=["x1"])
    assert ("s0", "x1") not in a.catalog.strays
    assert ("s0", "x2") in a.catalog.strays

    # Full: whatever it leaves out is gone.
    _beat(a.engine, _orphan("x2"))
    assert ("s0", "x2") in a.catalog.strays
    assert ("s0", "x3") not in a.catalog.strays and "x3" not in a.catalog.failed_replicas
    _beat(a.engine)
    assert not any(u == "s0" for u, _ in a.catalog.strays)


def test_an_unchanged_replica_is_judged_again_when_its_leader_reports(cluster):  # noqa: F811
    """A replica on a live server whose own report never changes (FAILED at its bootstrap, or
    a follower cut off): it becomes a stray when its tablet's leader reports a config that
    leaves it out, though it reports nothing new."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine, 4)
    a.engine.execute("create_table", create(n=1))
    tablet_id = next(iter(a.catalog.tablets))

    def report(role: str, leader: str, index: int, uuids) -> pb.TabletReport:
        return pb.TabletReport(
            tablet_id=tablet_id,
            data_state="READY",
            role=role,
            term=2,
            leader_uuid=leader,
            config_index=index,
            config_uuids=uuids,
        )

    def beat(uuid: str, *reports, incremental: bool = False):
        a.engine.heartbeat(
            pb.HeartbeatRequest(
                server_uuid=uuid,
                address="127.0.0.1:1",
                tablets=list(reports),
                incremental=incremental,
            )
        )

    beat("s1", report("FAILED", "", 1, ["s0", "s1", "s2"]))
    beat("s0", report("LEADER", "s0", 1, ["s0", "s1", "s2"]))
    assert ("s1", tablet_id) not in a.catalog.strays
    beat("s0", report("LEADER", "s0", 4, ["s0", "s2", "s3"]), incremental=True)
    assert a.catalog.strays[("s1", tablet_id)] == 1


class _CountingLock:
    """The catalog's lock, counting its holds (re-entries included)."""

    def __init__(self, lock) -> None:
        self._lock = lock
        self.holds = 0

    def __enter__(self):
        self._lock.acquire()
        self.holds += 1
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release()

    def acquire(self, *args, **kwargs):
        return self._lock.acquire(*args, **kwargs)

    def release(self) -> None:
        self._lock.release()


def test_a_large_report_is_taken_a_slice_at_a_time(cluster, monkeypatch):  # noqa: F811
    """A full report of 10,000 replicas held the catalog lock 70-120 ms in one hold (after a
    failover every server sends one to the new leader): the reports are taken
    REPORTS_PER_HOLD at a time, the lock let go between slices, and the result is the
    same as in one hold."""
    from coordinator import engine as engine_module

    monkeypatch.setattr(engine_module, "REPORTS_PER_HOLD", 2)
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    counting = _CountingLock(a.catalog.lock)
    object.__setattr__(a.catalog, "lock", counting)
    reports = [_orphan(f"x{i}") for i in range(7)]
    holds = counting.holds
    assert not _beat(a.engine, *reports).needs_full_report
    # One hold for the beat, ceil(7 / 2) = 4 for the reports, one for the answer.
    assert counting.holds - holds >= 6, counting.holds - holds
    assert {("s0", f"x{i}") for i in range(7)} <= set(a.catalog.strays)  # every one taken
    assert {f"x{i}" for i in range(7)} <= set(a.catalog.replica_reports)


def test_a_role_change_between_slices_asks_for_the_report_again(cluster, monkeypatch):  # noqa: F811
    """The node stops serving while it takes a full report's slices: it stops there, does
    not count the report as taken, and asks the server for a full one again."""
    from coordinator import engine as engine_module

    monkeypatch.setattr(engine_module, "REPORTS_PER_HOLD", 2)
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    assert not _beat(a.engine).needs_full_report  # one taken: not asked again
    calls = {"n": 0}
    real = a.engine.serving

    def serving_then_not() -> bool:
        calls["n"] += 1
        return real() and calls["n"] <= 1  # serving at the beat's start only

    monkeypatch.setattr(a.engine, "serving", serving_then_not)
    response = _beat(a.engine, *[_orphan(f"y{i}") for i in range(7)])
    assert response.needs_full_report
    assert "s0" not in a.catalog.full_reports
    assert "y6" not in a.catalog.replica_reports  # the slices after the change not taken
