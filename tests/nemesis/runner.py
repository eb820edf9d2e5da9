"""One nemesis run: workloads on client threads, a seeded fault schedule on the nemesis
thread, then heal, check every history, and report.

    with NemesisCluster.build(root) as cluster:
        result = run(cluster, schedule, faults, workloads)
        print(result.summary())

On an anomaly the run writes, under `<cluster logs>/nemesis-<tag>/`, the history
(history.jsonl), the schedule (schedule.json, replayable with --schedule) and a timeline
(timeline.html); `result.artifacts` says where.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.nemesis.cluster import NemesisCluster
from tests.nemesis.faults import LEADER, Fault, Schedule, Step
from tests.nemesis.timeline import write_timeline
from tests.nemesis.workloads import Event, Recorder, Workload

logger = logging.getLogger("nemesis.runner")

SUMMARY_LINES_MAX = 12
FAULTS_LISTED_MAX = 40  # faults listed one a line in the summary  # of one anomaly in the summary
JOIN_TIMEOUT_S = 60.0  # a client thread ends within its operation timeout after stop


class PauseFault:
    """SIGSTOP a node's process for the step's hold (longer than the lease), then SIGCONT."""

    kind = "pause"

    def __init__(self, cluster: NemesisCluster) -> None:
        self.cluster = cluster
        self._paused: set[str] = set()

    def choose(self, rng: random.Random, nodes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        # The coordinator leader half of the time: a paused leader must lose its lease.
        return "pause", (LEADER if rng.random() < 0.5 else rng.choice(list(nodes)),)

    def inject(self, step: Step) -> Step:
        targets = tuple(self.cluster.resolve(t) for t in step.targets)
        for name in targets:
            self.cluster.pause(name)
            self._paused.add(name)
        return Step(step.offset_s, step.kind, step.action, targets, step.hold_s)

    def heal(self) -> None:
        for name in sorted(self._paused):
            self.cluster.resume(name)
        self._paused.clear()


class PowerFault:
    """Power loss (kind `power`) on a NemesisCluster built with `lazy_disks`: kill -9 of the
    targets' processes, then the loss of what their lazyfs mounts hold unsynced (torn at a
    sector for `node-torn`); `all` takes every node at once. Heal starts them again on what
    survived. The file system and the loss itself are tests/nemesis/lazyfs.py and power.py."""

    kind = "power"
    ACTIONS = ("node", "node", "node-torn", "all")  # one node thrice as often as all

    def __init__(self, cluster: NemesisCluster) -> None:
        if not cluster.lazy_disks:
            raise SystemExit("power faults need the cluster built with lazy_disks=True")
        self.cluster = cluster
        self._down: list[str] = []

    def choose(self, rng: random.Random, nodes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        action = rng.choice(self.ACTIONS)
        if action == "all":
            return action, tuple(nodes)
        return action, (rng.choice(list(nodes)),)

    def inject(self, step: Step) -> Step:
        assert self.cluster.disks is not None
        for name in step.targets:  # every process dies before any disk loses its cache
            self.cluster.kill(self.cluster.node(name))
            self._down.append(name)
        for name in step.targets:
            self.cluster.disks.power_loss(name, torn=step.action == "node-torn")
        return step

    def heal(self) -> None:
        while self._down:
            self.cluster.restart(self._down.pop(0))


def _net_fault(cluster: NemesisCluster) -> Fault:
    from tests.nemesis.net import NetFault

    return NetFault(cluster)


def _clock_fault(cluster: NemesisCluster) -> Fault:
    from tests.nemesis.clock import ClockFault

    return ClockFault(cluster)


FAULT_FACTORIES: dict[str, Callable[[NemesisCluster], Fault]] = {
    "clock": _clock_fault,
    "partition": _net_fault,
    "pause": PauseFault,
    "power": PowerFault,
}


@dataclass
class RunResult:
    seed: int
    tag: str
    events: list[Event]
    injected: list[tuple[float, float, Step]]  # (start_s, end_s, step) of each injected fault
    anomalies: list[str]
    artifacts: Path | None = None
    errors: list[str] = field(default_factory=list)  # the nemesis's own failures

    @property
    def ok(self) -> bool:
        return not self.anomalies and not self.errors

    def outcomes(self) -> Counter:
        return Counter(f"{e.workload}:{e.outcome}" for e in self.events)

    def summary(self) -> str:
        by = self.outcomes()
        lines = [
            f"nemesis run {self.tag} seed {self.seed}: {len(self.events)} operations, "
            f"{len(self.injected)} faults injected, {len(self.anomalies)} anomalies"
        ]
        for workload in sorted({e.workload for e in self.events}):
            parts = ", ".join(
                f"{o.lower()} {by[f'{workload}:{o}']}" for o in ("OK", "FAIL", "UNKNOWN")
            )
            lines.append(f"  {workload:9} {parts}")
        kinds = Counter(f"{s.kind}:{s.action}" for _, _, s in self.injected)
        listed = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        lines.append("  faults    " + (listed or "none"))
        for start, end, step in self.injected[:FAULTS_LISTED_MAX]:
            what = f"{step.kind}:{step.action} {' | '.join(step.targets)}"
            lines.append(f"            [{start:7.2f}s, {end:7.2f}s] {what}")
        for anomaly in self.anomalies:  # the whole text is in anomalies.txt
            text = anomaly.splitlines()
            lines += [f"  ANOMALY   {line}" for line in text[:SUMMARY_LINES_MAX]]
            if len(text) > SUMMARY_LINES_MAX:
                lines.append(f"            ... {len(text) - SUMMARY_LINES_MAX} more lines")
        lines += [f"  ERROR     {e}" for e in self.errors]
        if self.artifacts is not None:
            lines.append(f"  history, schedule and timeline in {self.artifacts}")
        return "\n".join(lines)


def make_faults(cluster: NemesisCluster, kinds: Sequence[str]) -> list[Fault]:
    unknown = [k for k in kinds if k not in FAULT_FACTORIES]
    if unknown:
        raise SystemExit(f"unknown fault kind(s) {unknown}; known: {sorted(FAULT_FACTORIES)}")
    return [FAULT_FACTORIES[k](cluster) for k in kinds]


def run(
    cluster: NemesisCluster,
    schedule: Schedule,
    faults: Sequence[Fault],
    workloads: Sequence[Workload],
    tag: str,
    write_artifacts: bool = True,
) -> RunResult:
    """Run the workloads for the schedule's duration while its steps are injected, heal,
    check. Every fault is healed whatever happens."""
    by_kind = {f.kind: f for f in faults}
    missing = {s.kind for s in schedule.steps} - set(by_kind)
    assert not missing, f"the schedule has steps of kinds without a fault: {missing}"
    for w in workloads:
        w.setup()
    t0 = time.monotonic()
    rec = Recorder(t0)
    stop = threading.Event()
    injected: list[tuple[float, float, Step]] = []
    nemesis_errors: list[str] = []
    threads = []
    for w in workloads:
        for i in range(w.clients):
            rng = random.Random(f"{schedule.seed}/{w.name}/{i}")
            threads.append(
                threading.Thread(
                    target=_guarded, args=(w.worker, nemesis_errors, i, rng, rec, stop),
                    name=f"nemesis-{w.name}-{i}", daemon=True,
                )
            )  # fmt: skip
    for t in threads:
        t.start()
    try:
        for step in schedule.steps:
            if stop.wait(max(0.0, t0 + step.offset_s - time.monotonic())):
                break
            fault = by_kind[step.kind]
            start = time.monotonic() - t0
            applied = step
            try:
                applied = fault.inject(step)
                logger.info("inject %s", applied.describe())
                stop.wait(step.hold_s)
            finally:
                fault.heal()
                injected.append((start, time.monotonic() - t0, applied))
        stop.wait(max(0.0, t0 + schedule.duration_s - time.monotonic()))
    finally:
        stop.set()
        for fault in faults:
            fault.heal()
        for t in threads:
            t.join(JOIN_TIMEOUT_S)
            if t.is_alive():
                nemesis_errors.append(f"client thread {t.name} did not end")
    events = rec.events()
    anomalies: list[str] = []
    for w in workloads:
        anomalies += w.check(events)
    result = RunResult(schedule.seed, tag, events, injected, anomalies, errors=nemesis_errors)
    if not result.ok and write_artifacts:
        result.artifacts = write_run(cluster.log_dir / f"nemesis-{tag}", schedule, result)
    return result


def _guarded(fn: Callable, errors_out: list[str], *args) -> None:
    try:
        fn(*args)
    except Exception as exc:  # a client thread that dies is the harness's failure: say so
        logger.exception("client thread failed")
        errors_out.append(f"{threading.current_thread().name}: {type(exc).__name__}: {exc}")


def write_run(out: Path, schedule: Schedule, result: RunResult) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "history.jsonl", "w") as f:
        for e in result.events:
            f.write(json.dumps(e.to_dict(), default=repr) + "\n")
    (out / "schedule.json").write_text(schedule.to_json())
    (out / "anomalies.txt").write_text("\n".join(result.anomalies + result.errors) + "\n")
    write_timeline(out / "timeline.html", result.events, result.injected, result.anomalies)
    return out
