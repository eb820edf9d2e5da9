"""Membership change through `logstore serve` processes: grow 1 -> 3 replicas under load,
and replace a dead replica. New replicas catch up by snapshot (the journal was compacted
before they joined). The replicas run CURVE (the default); the test's key holds the server
and admin roles, and membership changes are signed with the group's password as well."""

from __future__ import annotations

import threading

import pytest

from logstore.remote import RemoteLogStore
from rpc import errors, privileged
from rpc.errors import RpcError

from .helpers import PASSWORD, wait_for
from .procs import ReplicaProcess, make_replicas, remote

pytestmark = pytest.mark.integration

ARGS = ["--compaction-min-entries", "200"]
# Membership changes are privileged: signed with the group's password (rpc/privileged.py).
ADMIN_KEY = privileged.derive_key(PASSWORD)


class Load:
    """One writer appending unique entries until stopped; remembers what was acknowledged."""

    def __init__(self, replicas: list[ReplicaProcess]) -> None:
        self.replicas = list(replicas)
        self.acked: dict[int, bytes] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="membership-load")
        self.thread.start()

    def _run(self) -> None:
        with remote(self.replicas, connect_timeout_s=1.0) as store:
            k = 0
            while not self.stop.is_set():
                payload = b"load-%d" % k
                k += 1
                try:
                    self.acked[store.append("m", payload, timeout_s=3.0)] = payload
                except RpcError:
                    continue

    def finish(self) -> dict[int, bytes]:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.acked


def _barrier_ok(store: RemoteLogStore) -> bool:
    try:
        store.barrier(timeout_s=5.0)
        return True
    except RpcError:
        return False


def _status(r: ReplicaProcess):
    with remote([r], connect_timeout_s=2.0) as s:
        return s.status(timeout_s=5.0)


def _check_same(replicas: list[ReplicaProcess], acked: dict[int, bytes]) -> None:
    views = []
    for r in replicas:
        with remote([r]) as s:
            s.barrier(timeout_s=30.0)
            views.append(s.read("m", 1, 100_000, timeout_s=10.0))
    by_id = {e.id: e.data for e in views[0]}
    for i, p in acked.items():
        assert by_id[i] == p
    for v in views[1:]:
        assert v == views[0]


def test_grow_one_to_three_under_load(tmp_path):
    a, b, c = make_replicas(tmp_path, 3, ARGS, secure=True)
    a.peers = [a.raft_address]
    b.peers = [a.raft_address]
    c.peers = [a.raft_address, b.raft_address]
    started = []
    try:
        a.start()
        started.append(a)
        load = Load([a])
        wait_for(lambda: len(load.acked) >= 500, 60, "appends on the single replica")
        wait_for(lambda: _status(a).journal_first_index > 1, 60, "a compacted journal")
        b.start()
        started.append(b)
        with remote([a]) as intruder:  # the admin role, no password: refused, no change
            with pytest.raises(errors.Unauthenticated):
                intruder.add_member(b.raft_address, timeout_s=30.0)
        with RemoteLogStore([a.rpc_address], privileged_key=ADMIN_KEY) as plaintext:
            with pytest.raises(errors.Unauthenticated):  # the password, no key: refused
                plaintext.add_member(b.raft_address, timeout_s=30.0)
        with remote([a], privileged_key=ADMIN_KEY) as admin:
            admin.add_member(b.raft_address, timeout_s=30.0)
        wait_for(lambda: _status(b).role == "follower" and _status(b).leader, 60, "b following")
        n = len(load.acked)
        wait_for(lambda: len(load.acked) >= n + 300, 60, "appends with two replicas")
        c.start()
        started.append(c)
        # Any replica forwards the change.
        with remote([b], privileged_key=ADMIN_KEY) as admin:
            admin.add_member(c.raft_address, timeout_s=30.0)
        n = len(load.acked)
        wait_for(lambda: len(load.acked) >= n + 300, 60, "appends with three replicas")
        acked = load.finish()
        for r in (a, b, c):
            st = _status(r)
            assert sorted(st.members) == sorted([a.raft_address, b.raft_address, c.raft_address])
        # They started empty after the leader had compacted: they catch up by snapshot (the
        # newest member may still be on its way there: a and b commit without it).
        wait_for(
            lambda: _status(b).snapshots_loaded >= 1 and _status(c).snapshots_loaded >= 1,
            60,
            "b and c caught up by snapshot",
        )
        _check_same([a, b, c], acked)
        # The group now survives the loss of the first replica.
        a.kill()
        with remote([b, c]) as s:
            wait_for(lambda: _barrier_ok(s), 60, "a new leader among b and c")
            new_id = s.append("m", b"after-a-died", timeout_s=30.0)
            assert s.read("m", new_id)[0].data == b"after-a-died"
    finally:
        for r in started:
            r.kill()


def test_replace_a_dead_replica(tmp_path):
    replicas = make_replicas(tmp_path, 4, ARGS, secure=True)
    a, b, c, d = replicas
    for r in (a, b, c):
        r.peers = [a.raft_address, b.raft_address, c.raft_address]
    d.peers = [a.raft_address, b.raft_address]
    started = []
    try:
        for r in (a, b, c):
            r.start()
            started.append(r)
        load = Load([a, b])
        wait_for(lambda: len(load.acked) >= 400, 60, "appends")
        c.kill()
        n = len(load.acked)
        wait_for(lambda: len(load.acked) >= n + 200, 60, "appends with c dead")
        with remote([a, b], privileged_key=ADMIN_KEY) as admin:
            admin.remove_member(c.raft_address, timeout_s=30.0)
            # Not started yet: refused, the member list unchanged (a voter that is not
            # there would raise the majority without adding a vote).
            with pytest.raises(RpcError, match="nothing accepts connections"):
                admin.add_member(d.raft_address, timeout_s=30.0)
            assert sorted(_status(a).members) == sorted([a.raft_address, b.raft_address])
            d.start()
            started.append(d)
            admin.add_member(d.raft_address, timeout_s=30.0)
        n = len(load.acked)
        wait_for(lambda: len(load.acked) >= n + 200, 60, "appends after the replacement")
        acked = load.finish()
        _check_same([a, b, d], acked)
        assert _status(d).snapshots_loaded >= 1
        for r in (a, b, d):
            assert sorted(_status(r).members) == sorted(
                [a.raft_address, b.raft_address, d.raft_address]
            )
        # With d in, the group survives the loss of a.
        a.kill()
        with remote([b, d]) as s:
            wait_for(lambda: _barrier_ok(s), 60, "a new leader among b and d")
            s.append("m", b"after-a-died", timeout_s=30.0)
    finally:
        for r in started:
            r.kill()
