"""A log of lease-style entries, each invalidating the one before, stays small on disk and
restarts with only its live entry to load (the million-entry run is bench/logstore.py)."""

from __future__ import annotations

import os

import pytest

from logstore.replicated import ReplicaConfig, ReplicatedLogStore

from .helpers import PASSWORD, free_addresses

pytestmark = pytest.mark.integration

N = 30_000
PAYLOAD = b"L" * 200


def _disk_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))


def test_lease_churn_stays_small_and_restarts(tmp_path):
    (addr,) = free_addresses(1)
    config = ReplicaConfig(compaction_min_entries=2_000)
    data = str(tmp_path / "r")
    with ReplicatedLogStore(addr, [], data, PASSWORD, config=config) as store:
        prev = store.append("lease", PAYLOAD)
        pending = []
        for _ in range(N - 1):
            pending.append(
                store.append_async("lease", PAYLOAD, expected_id=prev + 1, invalidates=[prev])
            )
            prev += 1
            if len(pending) >= 1000:
                for f in pending[:500]:
                    f.result(30)
                del pending[:500]
        for f in pending:
            f.result(30)
        store.barrier()
        st = store.status()
        assert st["live_entries"] == 1 and store.last_id("lease") == N
        assert st["snapshots_written"] >= 1
        history_bytes = N * len(PAYLOAD)
        # Bounded by the compaction threshold, not by history (6 MB of entries).
        assert _disk_bytes(data) < history_bytes / 5
    with ReplicatedLogStore(addr, [], data, PASSWORD, config=config) as store:
        store.barrier(timeout_s=30.0)
        assert store.last_id("lease") == N
        live = store.read("lease")
        assert [e.id for e in live] == [N] and live[0].invalidates == (N - 1,)
        assert store.status()["snapshots_loaded"] >= 1
        # Leases keep working after the restart.
        assert store.append("lease", PAYLOAD, expected_id=N + 1, invalidates=[N]) == N + 1
