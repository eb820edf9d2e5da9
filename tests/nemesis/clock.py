"""Clock-rate skew of the coordinator lease (the `clock` fault kind) and the checker of its
safety property: never two coordinators serving as leader at the same real time.

Each coordinator's lease clock runs at the rate written in `<cluster root>/clock/<node id>`
(coordinator/leases/testclock.py; the processes must start with LOGCENTRIC_TEST_CLOCK_DIR
set, which `ClockFault` does when it is made before the cluster starts). Actions:
- `takeover`: the coordinator leader's clock runs `slow` (it thinks its lease lasts longer),
  every other coordinator's `fast` (it takes over sooner), and the leader is isolated from
  every other node so that a fast one does take over while the slow one still believes;
- `slow` / `fast`: one coordinator's clock at that rate, nothing else.
Heal: every rate back to 1.0 (and the isolation lifted).

`ServingMonitor` is a workload of one sampling thread per coordinator (Coordinator.Status:
role LEADER or RECOVERING means the node's lease says it may serve). Node X said it served
at some instant of each sample's [sent, received]; a run of consecutive serving samples
of one epoch therefore proves X served throughout [received of the first, sent of the
last] (serving within an epoch is one interval: a renewal that lands after the lease ran out
re-opens it only when nobody took over meanwhile, its append being conditional). Two such
intervals of different nodes that intersect are an overlap, reported as an anomaly.
Sampling can miss a short overlap; it never invents one.
"""

from __future__ import annotations

import itertools
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import logcentric
from coordinator.leases import LeaseConfig
from coordinator.leases.testclock import DIR_ENV
from rpc import errors
from rpc.protocols import coordinator_pb2 as pb
from tests.nemesis.cluster import NemesisCluster
from tests.nemesis.faults import LEADER, Step
from tests.nemesis.net import NetFault, drops_of
from tests.nemesis.workloads import Access, Event, Recorder, Workload, _retry

logger = logging.getLogger("nemesis.clock")

CLOCK_DIR = "clock"
RATE_SETTLE_S = 0.1  # the nodes re-read their rate file every 20 ms
SAMPLE_INTERVAL_S = 0.01
SAMPLE_TIMEOUT_S = 1.0
SAMPLES_MAX = 200_000
OVERLAPS_LISTED_MAX = 10
PROBE_TIMEOUT_S = 5.0


def drift_bound(lease: LeaseConfig) -> float:
    """The largest drift rate rho the lease tolerates: drift_margin_s >= lease_timeout_s *
    2 rho / (1 + rho), i.e. rho <= m / (2T - m) (design/coordinator.md)."""
    m, t = lease.drift_margin_s, lease.lease_timeout_s
    return m / (2 * t - m)


def within_margin(lease: LeaseConfig, slow: float, fast: float) -> bool:
    """Whether a leader whose clock runs at `slow` and a follower at `fast` (rates to real
    time) are safe: the leader's lease, (T - m) / slow of real time, ends before the
    follower's watch, T / fast, does."""
    return (lease.lease_timeout_s - lease.drift_margin_s) / slow < lease.lease_timeout_s / fast


def enable_clock_files(cluster: NemesisCluster) -> Path:
    """Make the cluster's coordinators (started after this call) read their rate files."""
    path = Path(cluster.root) / CLOCK_DIR
    path.mkdir(parents=True, exist_ok=True)
    if os.environ.get(DIR_ENV) != str(path):
        if any(cluster.is_up(n) for n in cluster.spec.coordinators):
            raise SystemExit(f"clock faults need {DIR_ENV} set before the coordinators start")
        os.environ[DIR_ENV] = str(path)
    return path


class ClockFault:
    """The `clock` fault kind (see the module docstring). `slow` and `fast` are the rates
    the steps use: by default a drift within the margin of the default lease."""

    kind = "clock"
    ACTIONS = ("takeover", "takeover", "slow", "fast")

    def __init__(self, cluster: NemesisCluster, slow: float = 0.98, fast: float = 1.02) -> None:
        assert 0 < slow <= 1 <= fast, (slow, fast)
        self.cluster = cluster
        self.slow = slow
        self.fast = fast
        self.dir = enable_clock_files(cluster)
        self.coordinators = [n.name for n in cluster.spec.coordinators]
        self._net = NetFault(cluster)
        self._rated: set[str] = set()

    def choose(self, rng: random.Random, nodes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        action = rng.choice(self.ACTIONS)
        if action == "takeover":
            return action, (LEADER,)
        return action, (rng.choice(self.coordinators),)

    def set_rate(self, name: str, rate: float) -> None:
        """Rewrite one coordinator's rate file (atomically: a reader sees old or new)."""
        tmp = self.dir / f".{name}.tmp"
        tmp.write_text(f"{rate!r}\n")
        tmp.replace(self.dir / name)
        self._rated.add(name)

    def inject(self, step: Step) -> Step:
        targets = tuple(self.cluster.resolve(t) for t in step.targets)
        applied = Step(step.offset_s, step.kind, step.action, targets, step.hold_s)
        if step.action == "takeover":
            (leader,) = targets
            for name in self.coordinators:
                self.set_rate(name, self.slow if name == leader else self.fast)
            time.sleep(RATE_SETTLE_S)  # in force before the leader is cut off
            isolate = Step(step.offset_s, "partition", "isolate", (leader,), step.hold_s)
            self._net.apply(drops_of(isolate, self.cluster.node_names))
        else:
            self.set_rate(targets[0], self.slow if step.action == "slow" else self.fast)
        logger.info("clock %s: rates %s", step.action, self.rates())
        return applied

    def rates(self) -> dict[str, float]:
        return {n: float((self.dir / n).read_text()) for n in sorted(self._rated)}

    def heal(self) -> None:
        self._net.heal()
        for name in sorted(self._rated):
            (self.dir / name).unlink(missing_ok=True)  # missing: rate 1.0
        self._rated.clear()


@dataclass(frozen=True, slots=True)
class Sample:
    node: str
    sent: float  # time.monotonic() of the test process (one clock for every node here)
    received: float
    serving: bool | None  # None: no answer
    epoch: int


@dataclass(frozen=True, slots=True)
class Serving:
    """A node proved serving throughout [start, end] (real time) in one epoch."""

    node: str
    epoch: int
    start: float
    end: float
    samples: int


class ServingMonitor(Workload):
    """Samples every coordinator's serving flag; `check` reports overlapping serving."""

    name = "serving"

    def __init__(self, cluster: NemesisCluster, tag: str) -> None:
        super().__init__(Access.of(cluster), tag)
        self.nodes = [(n.name, n.rpc) for n in cluster.spec.coordinators]
        self.clients = len(self.nodes)
        self._lock = threading.Lock()
        self._samples: list[Sample] = []
        self.t0 = time.monotonic()

    def worker(self, index: int, rng: random.Random, rec: Recorder, stop: threading.Event) -> None:
        self.t0 = rec.t0
        name, address = self.nodes[index]
        with self.access.meta(SAMPLE_TIMEOUT_S, [address]) as client:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    status = client.status(address, timeout_s=SAMPLE_TIMEOUT_S)
                    serving: bool | None = status.role in ("LEADER", "RECOVERING")
                    epoch = status.epoch
                except (errors.RpcError, OSError):
                    serving, epoch = None, 0
                sample = Sample(name, sent, time.monotonic(), serving, epoch)
                with self._lock:
                    assert len(self._samples) < SAMPLES_MAX, "too many samples"
                    self._samples.append(sample)
                stop.wait(SAMPLE_INTERVAL_S)

    def samples(self) -> list[Sample]:
        with self._lock:
            return list(self._samples)

    def intervals(self) -> list[Serving]:
        """Each node's proved serving intervals (runs of at least two serving samples)."""
        out: list[Serving] = []
        by_node: dict[str, list[Sample]] = {}
        for s in self.samples():
            by_node.setdefault(s.node, []).append(s)
        for node, samples in by_node.items():
            samples.sort(key=lambda s: s.sent)
            run: list[Sample] = []
            for s in [*samples, None]:
                if s is not None and s.serving and (not run or run[0].epoch == s.epoch):
                    run.append(s)
                    continue
                if len(run) >= 2 and run[0].received < run[-1].sent:
                    out.append(Serving(node, run[0].epoch, run[0].received, run[-1].sent, len(run)))
                run = [s] if s is not None and s.serving else []
        return sorted(out, key=lambda v: v.start)

    def overlaps(self) -> list[tuple[Serving, Serving, float]]:
        """Pairs of intervals of different nodes that intersect, and for how long (s)."""
        found = []
        intervals = self.intervals()
        for i, a in enumerate(intervals):
            for b in intervals[i + 1 :]:
                if b.start >= a.end:
                    break
                if a.node != b.node:
                    found.append((a, b, min(a.end, b.end) - b.start))
        return found

    def handovers(self) -> list[tuple[Serving, Serving, float]]:
        """Consecutive proved intervals of different nodes and the real time between the
        end of one and the start of the next (negative: both served; a lower bound of the
        true gap's accuracy is about two samples)."""
        out = []
        for a, b in itertools.pairwise(self.intervals()):
            if a.node != b.node:
                out.append((a, b, b.start - a.end))
        return out

    def current_overlap(self) -> tuple[Serving, Serving] | None:
        """An overlap still in progress or just proved: (older epoch, newer epoch)."""
        for a, b, _ in reversed(self.overlaps()):
            return (a, b) if a.epoch <= b.epoch else (b, a)
        return None

    def check(self, events: list[Event]) -> list[str]:
        found = self.overlaps()
        lines = [
            f"{a.node} (epoch {a.epoch}) and {b.node} (epoch {b.epoch}) both served for "
            f"{overlap_s * 1000:.0f} ms from {b.start - self.t0:.3f}s "
            f"({a.samples} and {b.samples} samples)"
            for a, b, overlap_s in found[:OVERLAPS_LISTED_MAX]
        ]
        if not found:
            return []
        return [f"two coordinators serving at the same real time, {len(found)} times:\n"
                + "\n".join(lines)]  # fmt: skip

    def summary(self) -> str:
        samples = self.samples()
        answered = sum(1 for s in samples if s.serving is not None)
        epochs = sorted({(v.node, v.epoch) for v in self.intervals()}, key=lambda x: x[1])
        gaps = ", ".join(f"{g * 1000:.0f}" for _, _, g in self.handovers())
        return (
            f"serving monitor: {len(samples)} samples ({answered} answered), "
            f"serving (node, epoch): {epochs}; handover gaps (ms): {gaps}"
        )


class SplitBrainProbe(Workload):
    """Once `monitor` proves two coordinators serving at once, sends one CreateTable (with
    its request id, never retried elsewhere) to the one of the older epoch. Its conditional
    append must fail: `check` reports the table if it exists, or an OK answer."""

    name = "probe"
    clients = 1

    def __init__(self, cluster: NemesisCluster, tag: str, monitor: ServingMonitor) -> None:
        super().__init__(Access.of(cluster), tag)
        self.monitor = monitor
        self.rpc_of = {n.name: n.rpc for n in cluster.spec.coordinators}
        self.table = f"nemesis_probe_{tag}"
        self.sent_to: str = ""

    def worker(self, index: int, rng: random.Random, rec: Recorder, stop: threading.Event) -> None:
        while not stop.wait(0.05):
            pair = self.monitor.current_overlap()
            if pair is not None:
                break
        else:
            return
        old = pair[0].node
        self.sent_to = old
        column = logcentric.Column("k", "int64", key=True)
        with self.access.meta(PROBE_TIMEOUT_S) as client:
            request = pb.CreateTableRequest(
                request_id=client.next_request_id(), name=self.table,
                schema=pb.Schema(columns=[column.to_pb()]), num_tablets=1, replication_factor=1,
            )  # fmt: skip
            rec.run(self.name, old, "create", self.table, None,
                    lambda: client.call_at(self.rpc_of[old], "CreateTable", request,
                                           pb.CreateTableResponse, PROBE_TIMEOUT_S),
                    True)  # fmt: skip

    def check(self, events: list[Event]) -> list[str]:
        mine = [e for e in events if e.workload == self.name]
        with self.access.connect(30.0) as client:
            names = _retry(client.list_tables, "final list of tables")
        out = []
        if any(e.outcome == "OK" for e in mine):
            out.append(f"the deposed leader {self.sent_to} acknowledged CreateTable")
        if self.table in names:  # type: ignore[operator]
            out.append(f"the deposed leader's CreateTable of {self.table} is in the catalog")
        return out
