"""Shared helpers for logstore tests: free ports, waiting on conditions, in-process clusters."""

from __future__ import annotations

import time
from collections.abc import Callable

from logstore.replicated import ReplicaConfig, ReplicatedLogStore
from rpc.addresses import free_port  # below the ephemeral range: no bind races

PASSWORD = "test-cluster-password"
FAST = ReplicaConfig(raft_min_timeout_s=0.3, raft_max_timeout_s=0.7, leader_fallback_timeout_s=2.0)


def free_addresses(n: int) -> list[str]:
    ports: set[int] = set()
    while len(ports) < n:
        ports.add(free_port())
    return [f"127.0.0.1:{p}" for p in sorted(ports)]


def wait_for(cond: Callable[[], object], timeout_s: float = 20.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def start_cluster(tmp_path, n: int, config: ReplicaConfig = FAST) -> list[ReplicatedLogStore]:
    addrs = free_addresses(n)
    stores = []
    try:
        for i, a in enumerate(addrs):
            stores.append(
                ReplicatedLogStore(a, addrs, str(tmp_path / f"r{i}"), PASSWORD, config=config)
            )
        wait_for(lambda: any(s.is_leader() for s in stores), what="a leader")
        for s in stores:
            s.barrier(timeout_s=20.0)
    except BaseException:
        for s in stores:
            s.close()
        raise
    return stores


def leader_of(stores: list[ReplicatedLogStore]) -> ReplicatedLogStore:
    return wait_for(lambda: next((s for s in stores if s.is_leader()), None), what="a leader")
