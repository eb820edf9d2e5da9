"""The flush checks of maintenance look at the tablets written since their last look, not at
every tablet five times a second (issue 28: with thousands of idle replicas that loop was
the largest part of an idle tablet server's CPU); a full pass over every tablet still runs
now and then (config entries, a flush that failed), and `run_maintenance_once` is one."""

from __future__ import annotations

import time

import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, six_rows
from tservers.fs import FsLayout
from tservers.tablet import manager as manager_mod
from tservers.tablet.manager import TabletManager
from tservers.tablet.tablet import TabletOptions
from tservers.wal.log import WalOptions

FLUSH_ROWS = 50
WAIT_S = 60.0  # a bound for the background flush, far above what it takes


@pytest.fixture
def looked_at(monkeypatch):
    """Every tablet id the flush check looked at, in order."""
    seen: list[str] = []
    real = TabletManager._flush_if_needed

    def spy(self, tablets):
        seen.extend(t.tablet_id for t in tablets)
        return real(self, tablets)

    monkeypatch.setattr(TabletManager, "_flush_if_needed", spy)
    monkeypatch.setattr(manager_mod, "MAINTENANCE_INTERVAL_S", 0.02)
    return seen


def _manager(root, **kw) -> TabletManager:
    m = TabletManager(
        FsLayout.format(root),
        WalOptions(segment_size_bytes_max=1 << 20),
        TabletOptions(flush_rows_threshold=FLUSH_ROWS),
        maintenance=True,
        **kw,
    )
    m.open()
    return m


def _write_unnoticed(t) -> None:
    """Rows past the flush threshold, by a write maintenance is not told of."""
    t.on_written = None
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(FLUSH_ROWS + 1))))], deadline())


def _wait(cond, what: str) -> None:
    end = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < end, f"no {what} within {WAIT_S} s"
        time.sleep(0.02)


def test_only_written_tablets_are_looked_at(tmp_path, monkeypatch, looked_at):
    monkeypatch.setattr(manager_mod, "MAINTENANCE_FULL_PASS_S", 1e9)  # no full pass here
    m = _manager(tmp_path / "root")
    try:
        tablets = [create(m, f"t{i}") for i in range(20)]
        written = tablets[7]
        written.write(1, [(OpType.INSERT, ipc(six_rows(range(FLUSH_ROWS + 10))))], deadline())
        _wait(lambda: len(written.blocks) >= 1, "flush of the written tablet")
        assert set(looked_at) == {"t7"}, sorted(set(looked_at))
        assert all(len(t.blocks) == 0 for t in tablets if t is not written)
    finally:
        m.close()


def test_a_full_pass_looks_at_every_tablet(tmp_path, monkeypatch, looked_at):
    monkeypatch.setattr(manager_mod, "MAINTENANCE_FULL_PASS_S", 1e9)
    m = _manager(tmp_path / "root")
    try:
        tablets = [create(m, f"t{i}") for i in range(5)]
        for t in tablets:
            _write_unnoticed(t)
        assert all(len(t.blocks) == 0 for t in tablets)
        m.run_maintenance_once()  # what the loop runs every MAINTENANCE_FULL_PASS_S
        assert all(len(t.blocks) == 1 for t in tablets)
        assert sorted(set(looked_at)) == [f"t{i}" for i in range(5)]
    finally:
        m.close()


def test_the_loop_runs_full_passes(tmp_path, monkeypatch, looked_at):
    monkeypatch.setattr(manager_mod, "MAINTENANCE_FULL_PASS_S", 0.05)
    m = _manager(tmp_path / "root")
    try:
        t = create(m, "t0")
        _write_unnoticed(t)
        _wait(lambda: len(t.blocks) >= 1, "flush by a full pass")
    finally:
        m.close()
