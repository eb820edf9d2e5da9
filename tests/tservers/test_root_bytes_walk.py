"""DiskSpace.root_bytes (the used bytes reported in heartbeats) walks the server's root at
most every ROOT_BYTES_INTERVAL_S, and at most every ROOT_BYTES_WALK_SHARE times what the
last walk took: a root of thousands of replicas is not walked every 10 s (issue 28)."""

from __future__ import annotations

import time

from tservers import fs as fs_mod
from tservers.fs import DiskSpace


def test_used_bytes_are_summed_again_after_the_interval(tmp_path, monkeypatch):
    (tmp_path / "a").write_bytes(b"x" * 100_000)
    disk = DiskSpace(tmp_path, "server-1")
    first = disk.root_bytes()
    assert first >= 100_000  # allocated bytes (st_blocks)
    (tmp_path / "b").write_bytes(b"y" * 200_000)
    assert disk.root_bytes() == first  # within the interval: the last sum
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_INTERVAL_S", 0.0)
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_WALK_SHARE", 0)
    disk._root_next_at = float("-inf")
    assert disk.root_bytes() >= first + 200_000


def test_a_slow_walk_waits_longer_before_the_next(tmp_path, monkeypatch):
    walks: list[float] = []
    real = fs_mod.tree_bytes

    def slow_walk(root):
        walks.append(time.monotonic())
        time.sleep(0.01)  # at least this long: the next walk waits >= 0.01 x the share
        return real(root)

    monkeypatch.setattr(fs_mod, "tree_bytes", slow_walk)
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_INTERVAL_S", 0.0)
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_WALK_SHARE", 10**6)  # 10,000 s after that walk
    disk = DiskSpace(tmp_path, "server-1")
    for _ in range(5):
        disk.root_bytes()
    assert len(walks) == 1
    monkeypatch.setattr(fs_mod, "ROOT_BYTES_WALK_SHARE", 0)  # the interval alone: 0 s
    disk._root_next_at = float("-inf")
    disk.root_bytes()
    disk.root_bytes()
    assert len(walks) == 3
