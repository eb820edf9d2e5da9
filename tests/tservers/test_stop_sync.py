"""A server's stop closes every WAL with one syncfs (issue 28): each footer used to take
an fsync of its own, ~2.9 s of a 10,000-replica server's stop. Real files, a real manager;
the fsyncs and the syncfs are counted around the real calls. After the stop every segment
holds its footer (read back from the files), and a new manager opens them all."""

from __future__ import annotations

import os

from tests.tservers.test_startup_many import _crashed_root
from tservers.fs import FsLayout
from tservers.tablet.manager import TabletManager
from tservers.wal import segment as seg
from tservers.wal import syncfs
from tservers.wal.log import WalOptions

TABLETS = 40


def _segments(root):
    return sorted((root / "wals").glob("*/*"))


def test_the_stop_writes_every_footer_and_syncs_them_once(tmp_path, monkeypatch):
    root = tmp_path / "root"
    ids = _crashed_root(root, TABLETS, peers=True)
    opts = WalOptions(segment_size_bytes_max=1 << 20)
    m = TabletManager(FsLayout.open(root), opts, maintenance=False)
    m.open(wait=True)
    assert sorted(m.replicas) == ids

    fsyncs, syncs = [], []
    real_fsync, real_syncfs = os.fsync, syncfs.sync_file_system

    def counting_fsync(fd):
        fsyncs.append(fd)
        return real_fsync(fd)

    def counting_syncfs(path):
        syncs.append(path)
        return real_syncfs(path)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    monkeypatch.setattr(syncfs, "sync_file_system", counting_syncfs)
    m.close()
    monkeypatch.undo()

    assert syncs == [root / "wals"]
    assert len(fsyncs) < TABLETS // 4, f"{len(fsyncs)} fsyncs for {TABLETS} footers"
    last = {}
    for p in _segments(root):
        last[p.parent.name] = p  # segments sort by sequence within a tablet's directory
    assert len(last) == TABLETS
    for p in last.values():
        assert seg.read_segment(p, is_last=True).footer is not None, p

    again = TabletManager(FsLayout.open(root), opts, maintenance=False)
    try:
        again.open(wait=True)
        assert sorted(again.replicas) == ids
        assert all(r.status.value == "RUNNING" for r in again.replicas.values())
    finally:
        again.close()


def test_without_syncfs_each_footer_is_synced(tmp_path, monkeypatch):
    root = tmp_path / "root"
    _crashed_root(root, 8, peers=True)
    m = TabletManager(FsLayout.open(root), WalOptions(segment_size_bytes_max=1 << 20),
                      maintenance=False)  # fmt: skip
    m.open(wait=True)
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(syncfs, "available", lambda: False)
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    m.close()
    monkeypatch.undo()
    assert len(fsyncs) >= 8
