"""A memstore that has taken no write for `flush_idle_s` is flushed (TabletManager._flush_idle,
`tserver start --flush-idle-s`; Kudu's `flush_threshold_secs`): an idle tablet does not keep
its last rows, fewer than the flush threshold, in the heap (~220 bytes a row) and its WAL for
good. Real tablets, files and WAL; the rule's clock is passed in, the maintenance thread's
test waits for the outcome only."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, keys, six_rows
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.tablet.tablet import TabletOptions
from tservers.wal.log import WalOptions

IDLE_S = 60.0


def _manager(root, *, maintenance: bool, flush_idle_s: float) -> TabletManager:
    m = TabletManager(
        FsLayout.format(root),
        WalOptions(),
        TabletOptions(flush_rows_threshold=1_000_000, flush_idle_s=flush_idle_s),
        maintenance=maintenance,
    )
    m.open()
    return m


def _write(t, ids) -> None:
    t.write(1, [(OpType.INSERT, ipc(six_rows(ids)))], deadline(30))


def _wait_flushed(t, timeout_s: float = 30.0) -> None:
    """Until the maintenance thread has flushed `t`'s memstore (bounded)."""
    end = time.monotonic() + timeout_s
    while (t.memstore_rows() or not t.blocks) and time.monotonic() < end:
        time.sleep(0.05)
    assert t.memstore_rows() == 0 and t.blocks


def _scan_ids(t) -> list:
    return keys(t.scan([], [], [], [], 0))


@pytest.fixture
def idle_manager(tmp_path):
    m = _manager(tmp_path / "root", maintenance=False, flush_idle_s=IDLE_S)
    yield m
    m.close()


def test_a_memstore_idle_for_the_time_is_flushed_and_reads_answer_the_same(idle_manager):
    m = idle_manager
    t = create(m, "t")
    _write(t, range(1_000))
    assert m._flush_idle(100.0, {t}) == 0  # seen written at 100
    assert m._flush_idle(100.0 + IDLE_S - 0.01) == 0  # not idle long enough
    assert t.memstore_rows() == 1_000 and not t.blocks
    assert m._flush_idle(100.0 + IDLE_S) == 1
    assert t.memstore_rows() == 0 and len(t.blocks) == 1
    assert m.idle_flushes == 1
    assert _scan_ids(t) == list(range(1_000))
    assert m._flush_idle(10_000.0) == 0  # forgotten until its next write: no second flush
    assert len(t.blocks) == 1


def test_a_write_starts_the_wait_again(idle_manager):
    m = idle_manager
    t = create(m, "t")
    _write(t, range(10))
    m._flush_idle(0.0, {t})
    _write(t, range(10, 20))
    assert m._flush_idle(IDLE_S - 1, {t}) == 0  # written again at IDLE_S - 1
    assert m._flush_idle(IDLE_S + 1) == 0  # idle since the second write: 2 s only
    assert m._flush_idle(2 * IDLE_S - 1) == 1
    assert _scan_ids(t) == list(range(20))


def test_an_empty_memstore_or_a_rule_turned_off_flushes_nothing(tmp_path, idle_manager):
    m = idle_manager
    t = create(m, "t")
    _write(t, range(100))
    t.flush()  # flushed already (the row threshold, or a flush of its own)
    assert m._flush_idle(0.0, {t}) == 0
    assert m._flush_idle(10 * IDLE_S) == 0
    assert len(t.blocks) == 1  # no empty block
    off = _manager(tmp_path / "off", maintenance=False, flush_idle_s=0)
    try:
        u = create(off, "u")
        _write(u, range(100))
        assert off._flush_idle(0.0, {u}) == 0
        assert off._flush_idle(1e9) == 0
        assert u.memstore_rows() == 100 and not u.blocks
    finally:
        off.close()


def test_idle_tablets_only_are_flushed_among_many(idle_manager):
    m = idle_manager
    busy, idle = create(m, "busy"), create(m, "idle")
    _write(busy, range(50))
    _write(idle, range(50))
    m._flush_idle(0.0, {busy, idle})
    _write(busy, range(50, 60))
    assert m._flush_idle(IDLE_S, {busy}) == 1  # `idle` only
    assert idle.memstore_rows() == 0 and busy.memstore_rows() == 60
    assert m._flush_idle(2 * IDLE_S) == 1
    assert busy.memstore_rows() == 0
    assert _scan_ids(busy) == list(range(60)) and _scan_ids(idle) == list(range(50))


def test_the_maintenance_thread_flushes_an_idle_memstore(tmp_path):
    m = _manager(tmp_path / "root", maintenance=True, flush_idle_s=0.3)
    try:
        t = create(m, "t")
        _write(t, range(500))
        _wait_flushed(t)
        assert len(t.blocks) == 1
        assert m.idle_flushes == 1
        assert _scan_ids(t) == list(range(500))
    finally:
        m.close()


# ---------------------------------------------------------------- the memstores' budget
@contextlib.contextmanager
def _budget_manager(root, budget: int, *, maintenance: bool = False) -> Iterator[TabletManager]:
    m = TabletManager(
        FsLayout.format(root),
        WalOptions(),
        TabletOptions(flush_rows_threshold=1_000_000, flush_idle_s=0),  # no idle flush
        maintenance=maintenance,
        memstore_bytes_max=budget,
    )
    m.open()
    try:
        yield m
    finally:
        m.close()


def test_memstore_bytes_grow_with_the_rows_and_go_at_a_flush(tmp_path):
    with _budget_manager(tmp_path / "root", 0) as m:
        t = create(m, "t")
        assert t.memstore_bytes() == 0
        _write(t, range(1_000))
        one = t.memstore_bytes()
        _write(t, range(1_000, 3_000))
        assert one > 1_000 * 180 and t.memstore_bytes() > 2.5 * one
        t.flush()
        assert t.memstore_bytes() == 0


def test_over_the_budget_the_biggest_memstores_are_flushed_until_under(tmp_path):
    with _budget_manager(tmp_path / "probe", 0) as probe:
        p = create(probe, "p")
        _write(p, range(1_000))
        per_1000 = p.memstore_bytes()
    # Room for ~5,500 rows: tablets of 3,000, 2,000, 1,000 and 500 rows hold 6,500.
    with _budget_manager(tmp_path / "root", int(per_1000 * 5.5)) as m:
        sizes = {"a": 3_000, "b": 2_000, "c": 1_000, "d": 500}
        ts = {name: create(m, name) for name in sizes}
        for name, n in sizes.items():
            _write(ts[name], range(n))
        m._flush_idle(0.0, set(ts.values()))  # seen written (the round's bookkeeping)
        assert m._flush_for_memory() == 1  # the biggest only: 3,500 rows left, under
        assert ts["a"].memstore_rows() == 0 and len(ts["a"].blocks) == 1
        # What the metric says: the memstores left, as this round added them up.
        assert m.memstore_bytes_last == sum(ts[x].memstore_bytes() for x in "bcd") > 0
        assert [ts[x].memstore_rows() for x in "bcd"] == [2_000, 1_000, 500]
        assert m._flush_for_memory() == 0  # under now
        assert ts["a"] not in m._idle_since  # its empty memstore forgotten until written
        _write(ts["d"], range(500, 4_500))  # d: 4,500 rows, 7,500 in all
        m._flush_idle(1.0, {ts["d"]})
        assert m._flush_for_memory() == 1 and ts["d"].memstore_rows() == 0
        assert m.memory_flushes == 2
        for name, t in ts.items():
            assert _scan_ids(t) == list(range(4_500 if name == "d" else sizes[name]))


def test_no_budget_flushes_nothing(tmp_path):
    with _budget_manager(tmp_path / "root", 0) as m:
        t = create(m, "t")
        _write(t, range(5_000))
        m._flush_idle(0.0, {t})
        assert m._flush_for_memory() == 0 and t.memstore_rows() == 5_000


def test_the_maintenance_thread_keeps_the_memstores_under_the_budget(tmp_path):
    # A budget under 1,000 rows.
    with _budget_manager(tmp_path / "root", 100_000, maintenance=True) as m:
        t = create(m, "t")
        _write(t, range(2_000))
        _wait_flushed(t)
        assert m.memory_flushes >= 1
        assert _scan_ids(t) == list(range(2_000))
