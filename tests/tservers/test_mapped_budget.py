"""Resident mapped pages under a budget (`--mapped-bytes-max`, TabletManager.trim_mapped):
the pages of data blocks that reads touched count in the tablet server's RSS (RssFile: the
existence checks of a 50M-row load touched ~470 MiB of key-column pages); over the budget
every block's pages are handed back to the kernel and reads map them again from the page
cache, answering the same. Real files and mappings, this process's /proc/self/statm."""

from __future__ import annotations

import time

import pyarrow.compute as pc

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, six_rows
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.tablet.pages import mapped_file_bytes
from tservers.tablet.tablet import TabletOptions
from tservers.wal.log import WalOptions

ROWS = 400_000
MIB = 1 << 20


def _manager(root, *, maintenance: bool, mapped_bytes_max: int) -> TabletManager:
    m = TabletManager(
        FsLayout.format(root),
        WalOptions(),
        TabletOptions(flush_rows_threshold=10_000_000),
        maintenance=maintenance,
        mapped_bytes_max=mapped_bytes_max,
    )
    m.open()
    return m


def _load(m: TabletManager):
    t = create(m, "t")
    for s in range(0, ROWS, 50_000):
        t.write(1, [(OpType.INSERT, ipc(six_rows(range(s, s + 50_000))))], deadline(30))
    t.flush()
    return t


def _touch(t) -> int:
    """Read every column of every block through its mapping (its pages become resident);
    the sum of the ids."""
    total = 0
    for b in t.blocks:
        for name in b.table.column_names:
            pc.min_max(b.table.column(name))  # reads every value: every page of it
        total += pc.sum(b.table.column(0)).as_py()  # the key, id
    return total


def test_a_trim_hands_the_blocks_pages_back_and_reads_answer_the_same(tmp_path):
    m = _manager(tmp_path / "root", maintenance=False, mapped_bytes_max=0)
    try:
        t = _load(m)
        want = t.scan([], [], [], [], 0)
        _touch(t)
        touched = mapped_file_bytes()
        assert m.trim_mapped() == 0  # 0: no bound
        assert m.trim_mapped(bytes_max=touched + 64 * MIB) == 0  # under the bound
        freed = m.trim_mapped(bytes_max=1)
        after = mapped_file_bytes()
        assert freed >= 8 * MIB, (touched, after)  # the blocks' pages left the process
        assert after <= touched - 8 * MIB
        assert m.mapped_trims == 1 and m.mapped_trimmed_bytes == freed
        # A bound no trim can reach (the libraries' pages count): not walked again until
        # RssFile grows past what the trim left.
        assert m.trim_mapped(bytes_max=1) == 0 and m.mapped_trims == 1
        assert t.scan([], [], [], [], 0).equals(want)  # mapped again from the page cache
        assert _touch(t) == sum(range(ROWS))
    finally:
        m.close()


def _blocks_rss(data_dir) -> int:
    """Resident bytes of this process's mappings of files under `data_dir`
    (/proc/self/smaps): the blocks' pages alone, whatever else maps files meanwhile."""
    total, mine = 0, False
    prefix = str(data_dir)
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                mine = len(head) >= 6 and head[5].startswith(prefix)
            elif mine and line.startswith("Rss:"):
                total += int(head[1]) * 1024
    return total


def test_the_maintenance_thread_keeps_the_budget(tmp_path):
    m = _manager(tmp_path / "root", maintenance=True, mapped_bytes_max=0)
    try:
        t = _load(m)
        data_dir = t.fs.data_dir(t.tablet_id)
        _touch(t)
        assert m.trim_mapped() == 0 and m.mapped_trims == 0  # 0: no bound, no trim
        assert _blocks_rss(data_dir) >= 8 * MIB  # the touched blocks' pages are resident
        m.mapped_bytes_max = 1  # always over from now on
        end = time.monotonic() + 30
        while (m.mapped_trims == 0 or _blocks_rss(data_dir) > MIB) and time.monotonic() < end:
            time.sleep(0.05)
        assert m.mapped_trims >= 1  # a round saw it over and trimmed
        assert _blocks_rss(data_dir) <= MIB
        assert _touch(t) == sum(range(ROWS))
    finally:
        m.close()


def _wait_trimmed(m: TabletManager, data_dir, trims: int) -> None:
    end = time.monotonic() + 30
    while (m.mapped_trims < trims or _blocks_rss(data_dir) > MIB) and time.monotonic() < end:
        time.sleep(0.02)
    assert m.mapped_trims >= trims
    assert _blocks_rss(data_dir) <= MIB


def test_the_maintenance_rounds_trim_each_time_the_pages_come_back(tmp_path, monkeypatch):
    """The maintenance rounds do not stop after one trim: pages touched again past what the
    last trim left are handed back again; the thread ends with the manager."""
    monkeypatch.setattr("tservers.tablet.manager.MAPPED_GROWTH_MIN", 1 * MIB)
    m = _manager(tmp_path / "root", maintenance=True, mapped_bytes_max=0)
    try:
        t = _load(m)
        data_dir = t.fs.data_dir(t.tablet_id)
        want = _touch(t)
        m.mapped_bytes_max = 1
        _wait_trimmed(m, data_dir, 1)
        for round_ in range(2, 5):
            # Touched whole while unbounded: a trim in the middle of the touch would leave the
            # rest of its pages under the growth that makes the next trim (a busy machine).
            m.mapped_bytes_max = 0
            assert _touch(t) == want
            m.mapped_bytes_max = 1
            _wait_trimmed(m, data_dir, round_)
        rounds = m._maint
        assert rounds is not None and rounds.is_alive()
    finally:
        m.close()
    assert not rounds.is_alive()
