"""Deterministic simulation of several lease keepers over an in-memory log.

Each node runs the pure LeaseKeeper on its own drifting clock (local = offset + (1 + rate) *
real, |rate| <= rho). A seeded scheduler delivers reads and appends with random delays and
freezes nodes for random pauses (SIGSTOP). After every step it checks:
- no two nodes ever claim to lead at overlapping real times (a claim is the real-time window
  in which the node would answer as a serving leader);
- fencing: every record after a takeover by X, up to the next takeover, was written by X.
Some appends are lost, or their answers are (the sender learns nothing and steps down).
A control run with a drift margin too small for the drift shows that the checker bites.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

import pytest

from coordinator.leases import AppendLease, LeaseConfig, LeaseKeeper, Role
from coordinator.leases.driver import decode_lease, encode_lease
from logstore.api import LogConditionFailed
from logstore.memory import MemoryLogStore
from rpc.protocols import coordinator_pb2 as pb

LOG = "coordinator"


@dataclass
class SimNode:
    name: str
    keeper: LeaseKeeper
    offset: float
    rate: float
    paused_until: float = 0.0
    claims: list[tuple[float, float]] = field(default_factory=list)

    def local(self, real: float) -> float:
        return self.offset + (1.0 + self.rate) * real

    def real(self, local: float) -> float:
        return (local - self.offset) / (1.0 + self.rate)


class Violation(AssertionError):
    pass


class LeaseSim:
    def __init__(
        self,
        seed: int,
        nodes: int = 3,
        rho: float = 0.01,
        config: LeaseConfig | None = None,
        delay_max_s: float = 0.15,
        pause_prob: float = 0.02,
        op_prob: float = 0.3,
        unknown_prob: float = 0.03,
    ) -> None:
        self.rng = random.Random(seed)
        self.cfg = config or LeaseConfig(
            lease_timeout_s=1.0, renew_interval_s=0.2, drift_margin_s=0.1, epochs_kept=2
        )
        self.store = MemoryLogStore()
        self.nodes = [
            SimNode(
                f"n{i}",
                LeaseKeeper(f"n{i}", f"n{i}:1", self.cfg, seed=seed * 100 + i),
                offset=self.rng.uniform(0, 1000),
                rate=self.rng.uniform(-rho, rho),
            )
            for i in range(nodes)
        ]
        self.delay_max_s = delay_max_s
        self.pause_prob = pause_prob
        self.op_prob = op_prob
        self.unknown_prob = unknown_prob
        self.queue: list[tuple[float, int, int, str, object]] = []
        self.seq = 0
        self.writers: dict[int, str] = {}  # log id -> writer
        self.takeovers = 0
        self.appends = 0
        for i in range(nodes):
            self._push(self.rng.uniform(0, 0.1), i, "tick", None)

    def _push(self, t: float, node: int, kind: str, payload: object) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, node, kind, payload))

    def _delay(self) -> float:
        # Mostly short, sometimes long delays.
        if self.rng.random() < 0.05:
            return self.rng.uniform(0, 1.5 * self.cfg.lease_timeout_s)
        return self.rng.uniform(0, self.delay_max_s)

    def run(self, duration_s: float) -> None:
        while self.queue:
            t, _, i, kind, payload = heapq.heappop(self.queue)
            if t > duration_s:
                break
            node = self.nodes[i]
            if kind == "apply":
                self._apply(t, i, payload)  # reaches the store even if the sender is paused
                continue
            if t < node.paused_until:
                self._push(node.paused_until, i, kind, payload)
                continue
            getattr(self, f"_on_{kind}")(t, i, payload)
            self._record_claim(t, node)
        self.check_claims()

    # ------------------------------------------------------------ events

    def _on_tick(self, t: float, i: int, _payload: object) -> None:
        node = self.nodes[i]
        if self.rng.random() < self.pause_prob:
            node.paused_until = t + self.rng.uniform(0, 3 * self.cfg.lease_timeout_s)
        # Read now; the answer arrives after a delay.
        last = self.store.last_id(LOG)
        entries = self.store.read(LOG, from_id=node.keeper.read_through + 1, limit=100_000)
        full = None
        if node.keeper.wants_full_read(node.local(t)):
            everything = self.store.read(LOG, from_id=1, limit=100_000)
            full = {e.id: v for e in everything if (v := decode_lease(e.data)) is not None}
        incremental = [(e.id, decode_lease(e.data), tuple(e.invalidates)) for e in entries]
        snapshot = (last, incremental, full)
        self._push(t + self._delay(), i, "observe", snapshot)
        period = 0.05 / (1.0 + node.rate)
        self._push(t + period, i, "tick", None)

    def _on_observe(self, t: float, i: int, snapshot) -> None:
        node = self.nodes[i]
        k = node.keeper
        last, entries, full = snapshot
        k.observe_entries(last, [e for e in entries if e[0] > k.read_through])
        if full is not None:
            k.observe_live_leases(last, full)
        k.observe_tail(node.local(t), last)
        action = k.poll(node.local(t))
        if action is not None:
            self._push(t + self._delay(), i, "apply", action)
        elif (
            k.is_serving(node.local(t))
            and not k.append_in_flight
            and self.rng.random() < self.op_prob
        ):
            expected = k.begin_append(node.local(t))
            self._push(t + self._delay(), i, "apply", ("op", expected))

    def _apply(self, t: float, i: int, what) -> None:
        name = self.nodes[i].name
        if isinstance(what, AppendLease):
            data, expected, inv = encode_lease(what.lease), what.expected_id, what.invalidates
        else:
            op = pb.LogRecord(server_down=pb.ServerDown(server_uuid=name))
            data, expected, inv = op.SerializeToString(), what[1], ()
        # Sometimes the request is lost, or its answer is: the sender learns nothing.
        fate = self.rng.random()
        if fate < self.unknown_prob:
            self._push(t + self._delay(), i, "result", ("unknown", None))
            return
        try:
            got = self.store.append(LOG, data, expected_id=expected, invalidates=inv)
        except LogConditionFailed as e:
            self._push(t + self._delay(), i, "result", ("failed", e.last_id))
            return
        self.writers[got] = name
        self.appends += 1
        self._check_fencing(got, name, isinstance(what, AppendLease) and what.lease.takeover)
        answer = ("unknown", None) if fate < 2 * self.unknown_prob else ("ok", got)
        self._push(t + self._delay(), i, "result", answer)

    def _on_result(self, t: float, i: int, result) -> None:
        node = self.nodes[i]
        status, value = result
        if status == "ok":
            node.keeper.append_succeeded(node.local(t), value)
        elif status == "unknown":
            node.keeper.append_failed(node.local(t), None)
        else:
            node.keeper.append_failed(node.local(t), value)

    # ------------------------------------------------------------ invariants

    def _check_fencing(self, entry_id: int, writer: str, takeover: bool) -> None:
        if takeover:
            self.takeovers += 1
            self.holder = writer
            return
        if getattr(self, "holder", None) != writer:
            raise Violation(f"#{entry_id} written by {writer} while {self.holder} holds the lease")

    def _record_claim(self, t: float, node: SimNode) -> None:
        k = node.keeper
        if k.role is Role.LEADER and k.is_serving(node.local(t)):
            end = node.real(k.lease_end)
            if node.claims and node.claims[-1][1] >= t:
                start = node.claims[-1][0]
                node.claims[-1] = (start, max(end, node.claims[-1][1]))
            else:
                node.claims.append((t, end))
            self.check_claims()

    def check_claims(self) -> None:
        claims = sorted((s, e, n.name) for n in self.nodes for s, e in n.claims)
        ends: dict[str, float] = {}
        for start, end, name in claims:
            for other, other_end in ends.items():
                if other != name and start < other_end:
                    raise Violation(f"{other} leads until {other_end:.3f}, {name} from {start:.3f}")
            ends[name] = max(ends.get(name, end), end)


@pytest.mark.parametrize("seed", range(40))
def test_no_overlapping_leaders_and_fenced_log(seed):
    sim = LeaseSim(seed)
    sim.run(duration_s=30.0)
    assert sim.takeovers >= 1
    assert sim.appends >= sim.takeovers


def test_leadership_changes_under_pauses():
    """Across seeds the pauses really do cause failovers (the test exercises takeovers)."""
    total = 0
    for seed in range(5):
        sim = LeaseSim(seed, pause_prob=0.05)
        sim.run(duration_s=30.0)
        total += sim.takeovers
    assert total >= 10


def test_checker_detects_too_small_drift_margin():
    """Control: clocks drifting up to 50% with a 1% margin must overlap in some seed."""
    cfg = LeaseConfig(lease_timeout_s=1.0, renew_interval_s=0.2, drift_margin_s=0.01)
    found = 0
    for seed in range(30):
        sim = LeaseSim(seed, rho=0.5, config=cfg, pause_prob=0.005)
        try:
            sim.run(duration_s=20.0)
        except Violation:
            found += 1
    assert found >= 1


def test_checker_flags_overlapping_claims():
    sim = LeaseSim(0)
    sim.nodes[0].claims = [(1.0, 2.0)]
    sim.nodes[1].claims = [(2.0, 3.0)]
    sim.check_claims()  # touching is fine
    sim.nodes[2].claims = [(1.5, 1.6)]
    with pytest.raises(Violation):
        sim.check_claims()
