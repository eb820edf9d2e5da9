"""Tests of the Wing-Gong linearizability checker (tests/support/linearizability.py)."""

from __future__ import annotations

import random
import threading

import pytest

from tests.support.linearizability import (
    HistoryRecorder,
    OpKind,
    Outcome,
    check_history,
    read,
    write,
)


def test_empty_and_sequential_histories() -> None:
    assert check_history([]).ok
    h = [
        write("k", 1, 0, 1),
        read("k", 1, 2, 3),
        write("k", 2, 4, 5),
        read("k", 2, 6, 7),
    ]
    assert check_history(h).ok


def test_initial_value() -> None:
    assert check_history([read("k", None, 0, 1)]).ok
    assert not check_history([read("k", 0, 0, 1)]).ok
    assert check_history([read("k", 0, 0, 1)], initial=0).ok


def test_stale_read_after_completed_write_is_not_linearizable() -> None:
    h = [write("k", 1, 0, 1), write("k", 2, 2, 3), read("k", 1, 4, 5)]
    r = check_history(h)
    assert r.linearizable is False and r.key == "k"
    assert "NOT linearizable" in r.describe()


def test_concurrent_read_may_see_either_value() -> None:
    for seen in (1, 2):
        h = [write("k", 1, 0, 1), write("k", 2, 2, 6), read("k", seen, 3, 4)]
        assert check_history(h).ok


def test_reads_cannot_go_back_in_time() -> None:
    # Both reads overlap the write, but the second starts after the first ended.
    h = [write("k", 1, 0, 1), write("k", 2, 2, 10), read("k", 2, 3, 4), read("k", 1, 5, 6)]
    assert check_history(h).linearizable is False


def test_read_of_a_value_never_written() -> None:
    h = [write("k", 1, 0, 1), read("k", 7, 2, 3)]
    assert check_history(h).linearizable is False


def test_failed_write_never_takes_effect() -> None:
    h = [write("k", 1, 0, 1), write("k", 2, 2, 3, Outcome.FAIL), read("k", 2, 4, 5)]
    assert check_history(h).linearizable is False
    h = [write("k", 1, 0, 1), write("k", 2, 2, 3, Outcome.FAIL), read("k", 1, 4, 5)]
    assert check_history(h).ok


def test_unknown_write_may_or_may_not_take_effect() -> None:
    base = [write("k", 1, 0, 1), write("k", 2, 2, 3, Outcome.UNKNOWN)]
    assert check_history(base + [read("k", 1, 4, 5)]).ok
    assert check_history(base + [read("k", 2, 4, 5)]).ok
    # Late effect: seen long after the client gave up.
    assert check_history(base + [read("k", 1, 4, 5), read("k", 2, 100, 101)]).ok
    # Once seen it stays (no other write): 2 then 1 is impossible.
    bad = base + [read("k", 2, 4, 5), read("k", 1, 6, 7)]
    assert check_history(bad).linearizable is False


def test_unknown_read_is_ignored() -> None:
    h = [write("k", 1, 0, 1), read("k", 99, 2, None, Outcome.UNKNOWN)]
    assert check_history(h).ok


def test_keys_are_independent_and_the_bad_key_is_named() -> None:
    h = [
        write("a", 1, 0, 1),
        read("a", 1, 2, 3),
        write("b", 1, 0, 1),
        write("b", 2, 2, 3),
        read("b", 1, 4, 5),
    ]
    r = check_history(h)
    assert r.linearizable is False and r.key == "b"
    assert all(op.key == "b" for op in r.operations)


def test_touching_intervals_count_as_concurrent() -> None:
    h = [write("k", 1, 0, 5), read("k", None, 5, 6)]
    assert check_history(h).ok


def test_bound_gives_undecided() -> None:
    rng = random.Random(3)
    h = [write("k", i, rng.random(), 100 + rng.random()) for i in range(30)]
    h += [read("k", 999, 50, 200)]
    r = check_history(h, step_limit=500)
    assert r.linearizable is None and "undecided" in r.describe()


def _random_register_history(
    seed: int, clients: int = 4, ops_per_client: int = 12, keys: int = 2
) -> list:
    """A history produced by a real atomic register: each op takes effect at a random
    instant inside its interval; some writes are UNKNOWN (effect or not), some FAIL."""
    rng = random.Random(seed)
    events = []
    for c in range(clients):
        t = rng.random()
        for _ in range(ops_per_client):
            start = t
            end = start + rng.uniform(0.1, 3.0)
            point = rng.uniform(start, end)
            events.append((point, c, start, end, rng.randrange(keys), rng.random()))
            t = end + rng.uniform(0.0, 1.0)
    events.sort()
    state: dict[int, object] = {}
    out = []
    counter = 0
    for _point, c, start, end, key, r in events:
        if r < 0.5:
            counter += 1
            value = f"v{counter}"
            roll = rng.random()
            if roll < 0.1:
                out.append(write(key, value, start, end, Outcome.FAIL, f"c{c}"))
                continue
            if roll < 0.2:
                if rng.random() < 0.5:
                    state[key] = value
                out.append(write(key, value, start, None, Outcome.UNKNOWN, f"c{c}"))
                continue
            state[key] = value
            out.append(write(key, value, start, end, Outcome.OK, f"c{c}"))
        else:
            out.append(read(key, state.get(key), start, end, Outcome.OK, f"c{c}"))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_histories_of_a_real_register_are_linearizable(seed: int) -> None:
    h = _random_register_history(seed)
    r = check_history(h)
    assert r.ok, r.describe()


@pytest.mark.parametrize("seed", range(40))
def test_corrupted_read_is_detected(seed: int) -> None:
    h = _random_register_history(seed)
    reads = [i for i, op in enumerate(h) if op.kind is OpKind.READ]
    if not reads:
        pytest.skip("no read")
    i = random.Random(seed).choice(reads)
    op = h[i]
    h[i] = read(op.key, "never-written", op.invoke, op.response, Outcome.OK, op.client)
    assert check_history(h).linearizable is False


def test_recorder_from_threads() -> None:
    rec = HistoryRecorder()
    lock = threading.Lock()
    value: dict[str, object] = {}

    def client(n: int) -> None:
        for i in range(50):
            if i % 2:
                h = rec.invoke(OpKind.WRITE, "k", f"{n}-{i}", client=str(n))
                with lock:
                    value["k"] = f"{n}-{i}"
                rec.complete(h, Outcome.OK)
            else:
                h = rec.invoke(OpKind.READ, "k", client=str(n))
                with lock:
                    v = value.get("k")
                rec.complete(h, Outcome.OK, v)

    threads = [threading.Thread(target=client, args=(n,), name=f"client-{n}") for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    pending = rec.invoke(OpKind.WRITE, "k", "late")
    hist = rec.history()
    assert len(hist) == 201
    assert any(op.outcome is Outcome.UNKNOWN for op in hist)
    assert check_history(hist).ok
    rec.complete(pending, Outcome.FAIL)
