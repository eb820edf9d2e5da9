"""The nemesis checkers on histories built here (no cluster): the linearizability checker at
the size of a nemesis run, and the set and DDL checkers, each shown to pass a correct
history and to flag every kind of anomaly it names."""

from __future__ import annotations

import random

from tests.nemesis.workloads import Event, check_ddl, check_set
from tests.support.linearizability import Operation, Outcome, check_history, read, write


def _register_history(ops_n: int, clients: int, keys: int, seed: int) -> list[Operation]:
    """A linearizable register history: each client's operations in sequence, each taking
    effect at a random point of its interval; 5% of writes end UNKNOWN."""
    rng = random.Random(seed)
    clock = [0.0] * clients
    planned = []
    for c in range(clients):
        for _ in range(ops_n // clients):
            start = clock[c] + rng.random()
            end = start + rng.random() * 3
            clock[c] = end
            point = rng.uniform(start, end)
            planned.append((point, rng.random() < 0.5, rng.randrange(keys), start, end, c))
    planned.sort()
    state: dict[int, int | None] = dict.fromkeys(range(keys))
    history = []
    for value, (_, is_write, key, start, end, c) in enumerate(planned):
        if is_write:
            state[key] = value
            if rng.random() < 0.05:
                history.append(write(key, value, start, None, Outcome.UNKNOWN, f"c{c}"))
            else:
                history.append(write(key, value, start, end, Outcome.OK, f"c{c}"))
        else:
            history.append(read(key, state[key], start, end, Outcome.OK, f"c{c}"))
    return history


def test_register_checker_takes_nemesis_sized_histories() -> None:
    for ops_n, clients, keys in ((5_000, 4, 4), (10_000, 8, 4), (3_000, 10, 1)):
        history = _register_history(ops_n, clients, keys, seed=ops_n)
        result = check_history(history, step_limit=5_000_000, time_limit_s=600.0)
        assert result.ok, result.describe()
        assert result.steps < 1_000_000  # memoised: far below the bound


def test_register_checker_points_at_the_stale_read() -> None:
    history = _register_history(5_000, 4, 4, seed=1)
    # A stale read appended after everything: the value before the key's last write.
    key = 2
    writes = [op for op in history if op.key == key and op.kind.name == "WRITE"]
    ok_writes = [op for op in writes if op.outcome is Outcome.OK]
    last = max(op.response or 0.0 for op in history)
    stale = read(key, ok_writes[-2].value, last + 1, last + 2, Outcome.OK, "stale")
    result = check_history([*history, stale], step_limit=5_000_000, time_limit_s=600.0)
    assert result.linearizable is False and result.key == key
    assert result.stuck == stale
    text = result.describe()
    assert "NOT linearizable" in text and "stuck here" in text
    assert len(text.splitlines()) < 50  # the window around it, not the key's whole history


def _ev(op: str, key: object, outcome: str = "OK", error: str = "") -> Event:
    response = None if outcome == "UNKNOWN" else 1.0
    return Event("w", "c", op, key, key, 0.0, response, outcome, error)


def test_set_checker() -> None:
    events = [_ev("insert", 1), _ev("insert", 2), _ev("insert", 3, "UNKNOWN")]
    assert check_set(events, [1, 2]) == []
    assert check_set(events, [1, 2, 3]) == []  # the unknown one may be there or not
    assert check_set(events, [2]) == ["set: 1 acknowledged insert(s) lost: [1]"]
    assert check_set(events, [1, 2, 3, 3]) == ["set: 1 row(s) present more than once: [3]"]
    assert check_set(events, [1, 2, 9]) == ["set: 1 row(s) never inserted: [9]"]


def test_ddl_checker() -> None:
    events = [
        _ev("create", "a"),
        _ev("create", "b"),
        _ev("drop", "b"),
        _ev("create", "u", "UNKNOWN", "TimedOut: x"),
        _ev("create", "d"),
        _ev("drop", "d", "UNKNOWN", "TimedOut: x"),
    ]
    for final in (["a"], ["a", "u"], ["a", "d"], ["a", "u", "d"]):
        assert check_ddl(events, final) == [], final
    assert check_ddl(events, []) == ["ddl: acknowledged create of a lost"]
    assert check_ddl(events, ["a", "a"]) == ["ddl: table a listed 2 times"]
    assert check_ddl(events, ["a", "b"]) == ["ddl: table b dropped (acknowledged), still listed"]
    assert check_ddl(events, ["a", "z"]) == ["ddl: table z in the catalog, never created"]
    twice = [*events, _ev("create", "e", "UNKNOWN", "AlreadyExists: table e exists")]
    assert check_ddl(twice, ["a", "e"]) == [
        "ddl: create of e answered AlreadyExists: table e exists"
    ]
    gone = [_ev("create", "f"), _ev("drop", "f", "UNKNOWN", "NotFound: no table f")]
    assert check_ddl(gone, []) == ["ddl: drop of f (created) answered NotFound: no table f"]
