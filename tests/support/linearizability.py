"""Linearizability checker for key-value register histories (Wing & Gong, with Lowe's
memoisation), P-compositional by key.

A history is a list of Operation: write(key, value) or read(key) -> value, each with an
invoke time, a response time and an outcome:
- OK: it took effect between invoke and response (a read's `value` is what it returned);
- FAIL: it certainly did not take effect (dropped from the check);
- UNKNOWN: it may or may not have taken effect, at any time after invoke (a timed-out or
  crashed write); an UNKNOWN read constrains nothing and is dropped.

    result = check_history(ops, initial=None, step_limit=2_000_000, time_limit_s=10.0)
    assert result.ok, result.describe()

`result.linearizable` is True, False, or None when the step/time bound ran out first.
When False, `result.stuck` is the operation the longest linearization found could not take
(a read of a value the register no longer held, most often) and `describe()` shows the
operations around it rather than the key's whole history. HistoryRecorder collects
operations from client threads (monotonic clock). The memo of (linearized set, state) is
Porcupine's; the nemesis (tests/nemesis) runs its register histories through it.

Cost: exponential in the number of operations concurrent on one key in the worst case;
with memoisation, histories of a few thousand operations check in well under a second when
about 10 or fewer operations overlap on a key (measured: 2000 ops, 10 clients, 3 keys in
0.03 s; 10,000 ops, 8 clients, 4 keys in 0.3 s; 3,000 ops, 10 clients, 1 key in 1.7 s,
tests/nemesis/test_checkers.py), while 16 clients hammering a single key can exhaust the
bound. Keep client counts per key small in integration tests. Two exact reductions keep
UNKNOWN writes cheap: one whose value no read returned is dropped, and the only write of
a value that a read returned becomes an OK write ending at that read's response. Writes
with unique values get the most out of the second.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

DESCRIBE_LINES_MAX = 40


class OpKind(enum.Enum):
    READ = "READ"
    WRITE = "WRITE"


class Outcome(enum.Enum):
    OK = "OK"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class Operation:
    kind: OpKind
    key: Hashable
    value: Any  # the value written, or the value an OK read returned
    invoke: float
    response: float | None  # None: never answered (UNKNOWN)
    outcome: Outcome = Outcome.OK
    client: str = ""

    def __post_init__(self) -> None:
        if self.outcome is Outcome.OK:
            assert self.response is not None, "an OK operation has a response time"
        if self.response is not None:
            assert self.response >= self.invoke, self


def write(key: Hashable, value: Any, invoke: float, response: float | None,
          outcome: Outcome = Outcome.OK, client: str = "") -> Operation:  # fmt: skip
    return Operation(OpKind.WRITE, key, value, invoke, response, outcome, client)


def read(key: Hashable, value: Any, invoke: float, response: float | None,
         outcome: Outcome = Outcome.OK, client: str = "") -> Operation:  # fmt: skip
    return Operation(OpKind.READ, key, value, invoke, response, outcome, client)


@dataclass(frozen=True, slots=True)
class CheckResult:
    linearizable: bool | None  # None: the bound ran out before an answer
    key: Hashable | None = None  # the first key found not linearizable (or undecided)
    operations: tuple[Operation, ...] = ()  # that key's operations
    steps: int = 0
    # Not linearizable: the longest linearization the search found covers `linearized` of
    # the key's operations, and could not get past `stuck` (an operation that returned
    # before any order of the others let it take effect).
    linearized: int = 0
    stuck: Operation | None = None

    @property
    def ok(self) -> bool:
        return self.linearizable is True

    def describe(self, lines_max: int = DESCRIBE_LINES_MAX) -> str:
        """What went wrong, for people: the key, and its operations around where the search
        got stuck (all of them when it did not get stuck, up to `lines_max`)."""
        if self.linearizable:
            return f"linearizable ({self.steps} steps)"
        what = "NOT linearizable" if self.linearizable is False else "undecided (bound reached)"
        lines = [f"key {self.key!r}: {what} after {self.steps} steps"]
        ops = sorted(self.operations, key=lambda o: o.invoke)
        if self.stuck is not None:
            lines.append(
                f"  the longest linearization covers {self.linearized} of {len(ops)} operations;"
                f" it cannot take this one: {_op_line(self.stuck)}"
            )
            # Its window: the operations overlapping it, and those just before it.
            end = self.stuck.response if self.stuck.response is not None else float("inf")
            i = next((i for i, o in enumerate(ops) if o is self.stuck), 0)
            before = ops[max(0, i - lines_max // 2) : i]
            during = [
                o for o in ops[i:]
                if o.invoke <= end and (o.response is None or o.response >= self.stuck.invoke)
            ]  # fmt: skip
            ops = sorted({id(o): o for o in [*before, *during]}.values(), key=lambda o: o.invoke)
            lines.append("  operations around it:")
        shown = ops[:lines_max]
        lines += ["  " + _op_line(op, op is self.stuck) for op in shown]
        if len(ops) > len(shown):
            lines.append(f"  ... {len(ops) - len(shown)} more")
        return "\n".join(lines)


def _op_line(op: Operation, mark: bool = False) -> str:
    resp = "inf" if op.response is None else f"{op.response:.6f}"
    return (
        f"[{op.invoke:.6f}, {resp}] {op.client} {op.kind.name} {op.value!r} {op.outcome.name}"
        + ("  <-- stuck here" if mark else "")
    )


class _Node:
    __slots__ = ("op_index", "is_call", "time", "prev", "next", "match")

    def __init__(self, op_index: int, is_call: bool, t: float) -> None:
        self.op_index = op_index
        self.is_call = is_call
        self.time = t
        self.prev: _Node | None = None
        self.next: _Node | None = None
        self.match: _Node | None = None  # call -> its return (None if it never returns)


class _Bound(Exception):
    pass


def _check_key(
    ops: list[Operation], initial: Any, step_limit: int, deadline: float
) -> tuple[bool, int, int, int]:
    """Lowe's WGL search over one key's register history: (linearizable, steps, and when
    not, the longest linearization's length and the index of the operation it could not
    get past). Raises _Bound when out of budget."""
    nodes: list[_Node] = []
    for i, op in enumerate(ops):
        call = _Node(i, True, op.invoke)
        nodes.append(call)
        if op.response is not None and op.outcome is Outcome.OK:
            ret = _Node(i, False, op.response)
            call.match = ret
            nodes.append(ret)
    # Calls before returns at equal times: touching intervals count as concurrent.
    nodes.sort(key=lambda n: (n.time, 0 if n.is_call else 1, n.op_index))
    head = _Node(-1, True, float("-inf"))
    prev = head
    for n in nodes:
        prev.next = n
        n.prev = prev
        prev = n

    def lift(call: _Node) -> None:
        assert call.prev is not None
        call.prev.next = call.next
        if call.next is not None:
            call.next.prev = call.prev
        ret = call.match
        if ret is not None:
            assert ret.prev is not None
            ret.prev.next = ret.next
            if ret.next is not None:
                ret.next.prev = ret.prev

    def unlift(call: _Node) -> None:
        ret = call.match
        if ret is not None:
            assert ret.prev is not None
            ret.prev.next = ret
            if ret.next is not None:
                ret.next.prev = ret
        assert call.prev is not None
        call.prev.next = call
        if call.next is not None:
            call.next.prev = call

    state = initial
    linearized = 0
    cache: set[tuple[int, Any]] = set()
    stack: list[tuple[_Node, Any]] = []
    entry = head.next
    steps = 0
    deepest, stuck = -1, -1
    while True:
        steps += 1
        if steps > step_limit or (steps & 0x3FF == 0 and time.monotonic() > deadline):
            raise _Bound(steps)
        if entry is None:
            # Only calls that never returned are left: they need not take effect.
            return True, steps, 0, -1
        if entry.is_call:
            op = ops[entry.op_index]
            if op.kind is OpKind.WRITE:
                ok, new_state = True, op.value
            else:
                ok, new_state = state == op.value, state
            bit = 1 << entry.op_index
            if ok and (linearized | bit, new_state) not in cache:
                cache.add((linearized | bit, new_state))
                stack.append((entry, state))
                state = new_state
                linearized |= bit
                lift(entry)
                entry = head.next
            else:
                entry = entry.next
        else:
            # An operation returned before we could linearize it: backtrack.
            if len(stack) > deepest:
                deepest, stuck = len(stack), entry.op_index
            if not stack:
                return False, steps, deepest, stuck
            call, state = stack.pop()
            linearized &= ~(1 << call.op_index)
            unlift(call)
            entry = call.next


def _hashable(value: Any) -> Any:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def check_history(
    ops: Iterable[Operation],
    initial: Any = None,
    step_limit: int = 2_000_000,
    time_limit_s: float = 10.0,
) -> CheckResult:
    """Check a register history; every key starts at `initial`. The bounds are totals."""
    ops = list(ops)
    read_values = {
        (op.key, _hashable(op.value))
        for op in ops
        if op.kind is OpKind.READ and op.outcome is Outcome.OK
    }
    writers: dict[tuple[Hashable, Any], int] = {}
    first_read_end: dict[tuple[Hashable, Any], float] = {}
    for op in ops:
        vkey = (op.key, _hashable(op.value))
        if op.kind is OpKind.WRITE and op.outcome is not Outcome.FAIL:
            writers[vkey] = writers.get(vkey, 0) + 1
        elif op.kind is OpKind.READ and op.outcome is Outcome.OK:
            assert op.response is not None
            first_read_end[vkey] = min(first_read_end.get(vkey, op.response), op.response)
    by_key: dict[Hashable, list[Operation]] = {}
    for op in ops:
        if op.outcome is Outcome.FAIL:
            continue  # certainly without effect
        if op.kind is OpKind.READ and op.outcome is not Outcome.OK:
            continue  # an unanswered read tells nothing
        if (
            op.outcome is Outcome.UNKNOWN
            and op.kind is OpKind.WRITE
            and (op.key, _hashable(op.value)) not in read_values
        ):
            # Exact pruning: if no read ever returned its value, any linearization in
            # which it took effect stays valid without it (no read sits after it before
            # the next write), so assume it did not. This keeps the search small.
            continue
        vkey = (op.key, _hashable(op.value))
        if op.outcome is Outcome.UNKNOWN and op.kind is OpKind.WRITE and writers[vkey] == 1:
            # Exact too: the only write of a value some read returned took effect before
            # that read answered, so it is an OK write ending at the earliest such answer.
            end = max(op.invoke, first_read_end[vkey])
            op = Operation(op.kind, op.key, op.value, op.invoke, end, Outcome.OK, op.client)
        if op.outcome is Outcome.UNKNOWN and op.response is not None:
            op = Operation(op.kind, op.key, op.value, op.invoke, None, op.outcome, op.client)
        by_key.setdefault(op.key, []).append(op)
    deadline = time.monotonic() + time_limit_s
    total = 0
    for key in sorted(by_key, key=repr):
        key_ops = by_key[key]
        try:
            ok, steps, deepest, stuck = _check_key(key_ops, initial, step_limit - total, deadline)
        except _Bound as b:
            return CheckResult(None, key, tuple(key_ops), total + int(b.args[0]))
        total += steps
        if not ok:
            return CheckResult(
                False, key, tuple(key_ops), total, deepest, key_ops[stuck] if stuck >= 0 else None
            )
    return CheckResult(True, steps=total)


class HistoryRecorder:
    """Thread-safe recording of client operations with time.monotonic() timestamps."""

    def __init__(self, operations_max: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._open: dict[int, tuple[OpKind, Hashable, Any, float, str]] = {}
        self._done: list[Operation] = []
        self._next = 0
        self._max = operations_max

    def invoke(self, kind: OpKind, key: Hashable, value: Any = None, client: str = "") -> int:
        with self._lock:
            assert len(self._open) + len(self._done) < self._max, "history too long"
            handle = self._next
            self._next += 1
            self._open[handle] = (kind, key, value, time.monotonic(), client)
            return handle

    def complete(self, handle: int, outcome: Outcome, value: Any = None) -> None:
        """value: for a READ, what it returned (ignored for writes)."""
        now = time.monotonic()
        with self._lock:
            kind, key, v, t0, client = self._open.pop(handle)
            if kind is OpKind.READ:
                v = value
            resp = None if outcome is Outcome.UNKNOWN else now
            self._done.append(Operation(kind, key, v, t0, resp, outcome, client))

    def history(self) -> list[Operation]:
        """Completed operations plus still-open ones as UNKNOWN."""
        with self._lock:
            pending = [
                Operation(kind, key, v, t0, None, Outcome.UNKNOWN, client)
                for kind, key, v, t0, client in self._open.values()
            ]
            return list(self._done) + pending
