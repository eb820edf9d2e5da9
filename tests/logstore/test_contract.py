"""The logstore contract: one suite, every implementation (architecture section 3).

Runs against MemoryLogStore, a single-node ReplicatedLogStore, a follower of a 3-replica
ReplicatedLogStore cluster (appends travel to the leader), and RemoteLogStore through
`logstore serve`'s RPC service when that is available.
"""

from __future__ import annotations

import threading

import pytest

from logstore.api import LogConditionFailed, LogStore, read_live
from logstore.memory import MemoryLogStore
from logstore.replicated import ReplicatedLogStore
from rpc.errors import BadRequest, ConditionFailed

from .helpers import free_addresses, start_cluster


@pytest.fixture(
    params=[
        "memory",
        pytest.param("replicated-1", marks=pytest.mark.integration),
        pytest.param("replicated-3-follower", marks=pytest.mark.integration),
        pytest.param("remote", marks=pytest.mark.integration),
    ]
)
def store(request, tmp_path):
    if request.param == "memory":
        with MemoryLogStore() as s:
            yield s
    elif request.param == "replicated-1":
        (addr,) = free_addresses(1)
        with ReplicatedLogStore(addr, [], str(tmp_path / "r"), allow_insecure_dev=True) as s:
            s.barrier(timeout_s=20.0)
            yield s
    elif request.param == "replicated-3-follower":
        stores = start_cluster(tmp_path, 3)
        try:
            yield next(s for s in stores if not s.is_leader())
        finally:
            for s in stores:
                s.close()
    else:
        from .remote_fixture import remote_store

        with remote_store(tmp_path) as s:
            yield s


def test_is_a_logstore(store):
    assert isinstance(store, LogStore)


def test_empty_log(store):
    assert store.last_id("nothing") == 0
    assert store.read("nothing") == []
    store.barrier()


def test_ids_start_at_one_and_grow(store):
    assert [store.append("a", b"x%d" % i) for i in range(5)] == [1, 2, 3, 4, 5]
    assert store.last_id("a") == 5
    got = store.read("a")
    assert [(e.id, e.data) for e in got] == [(i, b"x%d" % (i - 1)) for i in range(1, 6)]


def test_logs_are_independent(store):
    assert store.append("a", b"1") == 1
    assert store.append("b", b"1") == 1
    assert store.append("a", b"2") == 2
    assert store.last_id("a") == 2 and store.last_id("b") == 1


def test_conditional_append(store):
    assert store.append("c", b"one", expected_id=1) == 1
    assert store.append("c", b"two", expected_id=2) == 2
    for wrong in (1, 2, 4, 100):
        with pytest.raises(LogConditionFailed) as info:
            store.append("c", b"bad", expected_id=wrong)
        assert info.value.last_id == 2
        assert isinstance(info.value, ConditionFailed)
    assert store.last_id("c") == 2
    assert [e.data for e in store.read("c")] == [b"one", b"two"]


def test_conditional_append_on_empty_log(store):
    with pytest.raises(LogConditionFailed) as info:
        store.append("e", b"x", expected_id=2)
    assert info.value.last_id == 0
    assert store.last_id("e") == 0
    assert store.append("e", b"x", expected_id=1) == 1


def test_invalidation(store):
    for i in range(1, 5):
        store.append("i", b"e%d" % i)
    new_id = store.append("i", b"e5", invalidates=[1, 3])
    assert new_id == 5
    assert [e.id for e in store.read("i")] == [2, 4, 5]
    assert store.read("i", 5)[0].invalidates == (1, 3)
    # Invalidation-only entry: consumes an id, holds no data, is never read.
    assert store.append("i", b"", invalidates=[2]) == 6
    assert [e.id for e in store.read("i")] == [4, 5]
    assert store.last_id("i") == 6


@pytest.mark.parametrize(
    "bad",
    [[1], [7], [0], [-1], [4, 4], [5, 1]],
    ids=["invalidated", "future", "zero", "negative", "twice", "one-bad"],
)
def test_bad_invalidation_changes_nothing(store, bad):
    for i in range(1, 6):
        store.append("b", b"e%d" % i)
    store.append("b", b"", invalidates=[1])
    before = store.read("b")
    with pytest.raises(BadRequest):
        store.append("b", b"x", invalidates=bad)
    assert store.last_id("b") == 6
    assert store.read("b") == before


def test_invalidating_an_invalidation_only_entry_is_refused(store):
    store.append("z", b"a")
    assert store.append("z", b"", invalidates=[1]) == 2
    with pytest.raises(BadRequest):
        store.append("z", b"", invalidates=[2])


def test_condition_checked_before_invalidation(store):
    store.append("o", b"a")
    with pytest.raises(LogConditionFailed):
        store.append("o", b"b", expected_id=5, invalidates=[1])
    assert [e.id for e in store.read("o")] == [1]


def test_read_from_and_limit(store):
    for i in range(1, 11):
        store.append("r", b"%d" % i)
    store.append("r", b"", invalidates=[3, 4])
    assert [e.id for e in store.read("r", from_id=2, limit=3)] == [2, 5, 6]
    assert [e.id for e in store.read("r", from_id=9)] == [9, 10]
    assert store.read("r", from_id=12) == []
    assert [e.id for e in store.read("r", limit=1)] == [1]
    for bad_limit in (0, -1, 10**9):
        with pytest.raises(BadRequest):
            store.read("r", limit=bad_limit)


def test_read_live_in_chunks(store):
    for i in range(1, 11):
        store.append("c", b"%d" % i)
    store.append("c", b"", invalidates=[3, 4, 8])
    assert [e.id for e in read_live(store, "c", chunk=2)] == [1, 2, 5, 6, 7, 9, 10]
    assert [e.id for e in read_live(store, "c", from_id=2, through=7, chunk=2)] == [2, 5, 6, 7]
    assert [e.data for e in read_live(store, "c", from_id=9, chunk=1)] == [b"9", b"10"]
    assert list(read_live(store, "c", from_id=12)) == []


def test_bad_names_and_sizes(store):
    with pytest.raises(BadRequest):
        store.append("", b"x")
    with pytest.raises(BadRequest):
        store.append("n" * 256, b"x")
    with pytest.raises(BadRequest):
        store.append("big", b"x" * ((4 << 20) + 1))
    assert store.last_id("big") == 0


def test_binary_data_round_trips(store):
    blob = bytes(range(256)) * 40
    i = store.append("bin", blob)
    assert store.read("bin", i)[0].data == blob


def test_concurrent_appends_get_unique_contiguous_ids(store):
    ids: list[int] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        for k in range(25):
            got = store.append("conc", b"%d-%d" % (w, k))
            with lock:
                ids.append(got)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(ids) == list(range(1, 201))
    store.barrier()
    entries = store.read("conc", limit=1000)
    assert sorted(e.data for e in entries) == sorted(
        b"%d-%d" % (w, k) for w in range(8) for k in range(25)
    )
    assert {e.id: e.data for e in entries} == {e.id: e.data for e in store.read("conc", limit=1000)}


def test_racing_conditional_appends_one_winner_per_id(store):
    wins: list[tuple[int, int]] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        for _ in range(30):
            last = store.last_id("race")
            try:
                got = store.append("race", b"%d" % w, expected_id=last + 1)
            except LogConditionFailed:
                continue
            with lock:
                wins.append((got, w))

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    store.barrier()
    won_ids = sorted(i for i, _ in wins)
    assert won_ids == sorted(set(won_ids))
    data = {e.id: e.data for e in store.read("race", limit=1000)}
    for i, w in wins:
        assert data[i] == b"%d" % w
    assert store.last_id("race") == len(data)


def test_barrier_after_append_sees_it(store):
    i = store.append("bar", b"x")
    store.barrier()
    assert store.last_id("bar") >= i
