"""Coalescing of appends into one Raft command (design/logstore.md, "batching").

Appends queued before one tick become one `_ls_batch` command. To make a batch happen
deterministically, the tests enqueue the appends from inside the tick thread (a task run by
`ls_run_on_tick` runs just before the queue is turned into a command), then check that each
sub-append got exactly the outcome a lone append would have had.
"""

from __future__ import annotations

import pickle
import threading
import time
from dataclasses import replace

import pytest

from logstore.api import LogConditionFailed
from rpc.errors import BadRequest

from .helpers import FAST, leader_of, start_cluster, wait_for

pytestmark = pytest.mark.integration


def _in_one_tick(store, appends: list[tuple]) -> list:
    """Submit `appends` ((log, data, expected_id, invalidates)) so they share one command."""
    futures: list = []
    ready = threading.Event()

    def task() -> None:
        try:
            for log, data, expected, inv in appends:
                futures.append(store.append_async(log, data, expected, inv))
        finally:
            ready.set()

    store._node.ls_run_on_tick(task)
    assert ready.wait(10.0)
    out = []
    for f in futures:
        try:
            out.append(f.result(10.0))
        except Exception as err:  # noqa: BLE001 - the test compares outcomes
            out.append(err)
    return out


def _batch_commands(store) -> list[tuple]:
    cmds = [pickle.loads(c[1:]) for c, _i, _t in store._journal[:] if c[:1] == b"\x00"]
    return [c for c in cmds if isinstance(c, tuple) and c[0] == 2]


def test_batch_applies_each_append_in_order_with_its_own_outcome(tmp_path):
    (store,) = stores = start_cluster(tmp_path, 1)
    try:
        base = store.append("b", b"first")  # id 1
        out = _in_one_tick(
            store,
            [
                ("b", b"two", None, ()),  # 2
                ("b", b"three", 3, ()),  # 3: condition true at this point of the batch
                ("b", b"nope", 3, ()),  # condition false now (next id is 4)
                ("b", b"", None, (base,)),  # 4: invalidation-only
                ("b", b"bad", None, (base,)),  # already invalidated: BadRequest
                ("b", b"dup", None, (2, 2)),  # invalidated twice: BadRequest
                ("other", b"x", 1, ()),  # another log: its own ids
                ("b", b"five", 5, (2,)),  # 5
            ],
        )
        assert out[0] == 2 and out[1] == 3
        assert isinstance(out[2], LogConditionFailed) and out[2].last_id == 3
        assert out[3] == 4
        assert isinstance(out[4], BadRequest) and isinstance(out[5], BadRequest)
        assert out[6] == 1 and out[7] == 5
        assert [(e.id, e.data, e.invalidates) for e in store.read("b")] == [
            (3, b"three", ()),
            (5, b"five", (2,)),
        ]
        assert store.last_id("b") == 5 and store.last_id("other") == 1
        batches = _batch_commands(store)
        assert len(batches) == 1 and len(batches[0][1][0]) == 8
    finally:
        for s in stores:
            s.close()


def test_batch_from_a_follower_is_forwarded_and_applied_everywhere(tmp_path):
    stores = start_cluster(tmp_path, 3)
    try:
        leader = leader_of(stores)
        follower = next(s for s in stores if s is not leader)
        out = _in_one_tick(follower, [("f", b"%d" % i, i + 1, ()) for i in range(20)])
        assert out == list(range(1, 21))
        # The follower applied them before answering; the others after a barrier.
        assert [e.data for e in follower.read("f")] == [b"%d" % i for i in range(20)]
        for s in stores:
            s.barrier(timeout_s=20.0)
            assert [e.id for e in s.read("f")] == list(range(1, 21))
        assert _batch_commands(leader), "the 20 appends should have travelled as one batch"
    finally:
        for s in stores:
            s.close()


def test_concurrent_callers_each_get_a_distinct_id(tmp_path):
    (store,) = stores = start_cluster(tmp_path, 1)
    try:
        results: list[list[int]] = [[] for _ in range(16)]

        def caller(i: int) -> None:
            for k in range(50):
                results[i].append(store.append("c", b"%d-%d" % (i, k)))

        threads = [threading.Thread(target=caller, args=(i,), name=f"c{i}") for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60.0)
        ids = [i for r in results for i in r]
        assert sorted(ids) == list(range(1, 801))
        for r in results:
            assert r == sorted(r)  # one caller's appends land in its order
        data = {e.id: e.data for e in store.read("c", limit=1000)}
        for i, r in enumerate(results):
            assert [data[x] for x in r] == [b"%d-%d" % (i, k) for k in range(50)]
    finally:
        for s in stores:
            s.close()


def test_heavy_load_holding_never_strands_an_append(tmp_path):
    """Batching under load (design/logstore.md): after a batch of at least
    append_linger_batch_min appends, the leader holds new appends while that batch is
    uncommitted and then lingers for its callers. A long linger makes the hold visible:
    a lone append after a heavy batch is held, then proposed when the linger ends, and
    every replica applies it without further traffic."""
    config = replace(FAST, append_linger_batch_min=8, append_linger_s=0.3)
    stores = start_cluster(tmp_path, 3, config)
    try:
        leader = leader_of(stores)
        out = _in_one_tick(leader, [("h", b"%d" % i, None, ()) for i in range(10)])
        assert out == list(range(1, 11))
        assert leader._node._ls_heavy
        holds = leader._node._ls_holds
        assert leader.append("h", b"lone", expected_id=11, timeout_s=10.0) == 11
        assert leader._node._ls_holds > holds, "the lone append should have lingered"
        assert not leader._node._ls_heavy  # a batch of one: light load again
        commit = leader.status()["commit_index"]
        for s in stores:
            wait_for(
                lambda s=s: s.status()["applied_index"] >= commit,
                what=f"{s.self_address} to apply the commit without further appends",
            )
            assert [e.id for e in s.read("h")] == list(range(1, 12))
    finally:
        for s in stores:
            s.close()


def test_wake_chain_skips_callers_that_gave_up_and_wakes_the_rest():
    """The outcomes of a large batch are handed over as a chain: each woken caller wakes
    the next. A caller that stopped waiting (timeout) must not break the chain, and one
    that is claimed by the chain at the moment it times out still gets its outcome."""
    from logstore.replicated import _Waiter, _WakeChain

    waiters = [_Waiter() for _ in range(6)]
    got: dict[int, object] = {}

    def wait(i: int, timeout_s: float) -> None:
        got[i] = waiters[i].result if waiters[i].wait(timeout_s) else "timed out"

    gave_up = threading.Thread(target=wait, args=(2, 0.01))
    gave_up.start()
    gave_up.join(10.0)
    assert got == {2: "timed out"}
    threads = [threading.Thread(target=wait, args=(i, 10.0)) for i in (0, 1, 3, 4, 5)]
    for t in threads:
        t.start()
    for i, w in enumerate(waiters):
        w.result = f"outcome {i}"
    chain = _WakeChain(waiters)
    chain.wake_next()
    for t in threads:
        t.join(10.0)
        assert not t.is_alive()
    assert got == {i: ("timed out" if i == 2 else f"outcome {i}") for i in range(6)}

    # Claimed by the chain while timing out: the waiter takes its outcome after all
    # (whichever comes first, the release or the timeout).
    w = _Waiter()
    w.result = "late"
    assert w.claim()  # what wake_next does first...
    late = threading.Thread(target=lambda: got.__setitem__("late", w.wait(0.01)))
    late.start()
    time.sleep(0.05)  # most likely timed out by now; the outcome is the same if not
    w._lock.release()  # ...then this
    late.join(10.0)
    assert got["late"] is True and w.result == "late"

    # Shutdown: a chain nobody started wakes everybody.
    waiters = [_Waiter() for _ in range(3)]
    chain = _WakeChain(waiters)
    chain.wake_all()
    assert all(w.wait(0.0) for w in waiters)


def test_a_stalled_wake_chain_wakes_the_rest_at_once():
    """The tick thread starts each chain before it polls, and wakes every caller still
    waiting on a chain that has not finished within WAKE_CHAIN_STALL_S (a caller the OS
    does not run for a while must not hold up the ones after it)."""
    from collections import deque
    from types import SimpleNamespace

    from logstore.replicated import WAKE_CHAIN_STALL_S, _RaftNode, _Waiter, _WakeChain

    waiters = [_Waiter() for _ in range(4)]
    node = SimpleNamespace(_ls_wake_chains=deque([_WakeChain(waiters)]), _ls_active_chains=[])
    deadline = _RaftNode._ls_advance_wake_chains(node)
    assert deadline is not None  # the poll must end in time to check the chain
    # Only the first caller was woken; it never ran, so the chain did not move on.
    assert [w._lock.locked() for w in waiters] == [False, True, True, True]
    started, chain = node._ls_active_chains[0]
    node._ls_active_chains = [(started - 2 * WAKE_CHAIN_STALL_S, chain)]
    assert _RaftNode._ls_advance_wake_chains(node) is None
    assert not any(w._lock.locked() for w in waiters)
    assert node._ls_active_chains == []
