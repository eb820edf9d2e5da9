"""The fault interface every nemesis implements, and the seeded schedule that drives them.

A fault kind (partition, pause, power, clock) is a `Fault`: from a random generator and the
cluster's node names it `choose`s one step (an action and its targets), it `inject`s a step,
and `heal`s everything it did. A `Schedule` is a list of `Step`s (time offset, kind, action,
targets, how long it holds), made from the seed alone: the same seed, kinds, node names and
duration give the same schedule, and a schedule saved as JSON replays as it is.

New kinds register in `tests/nemesis/runner.py` (FAULT_FACTORIES); their module only has
to provide a class with this interface.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

STEPS_MAX = 1_000  # a schedule longer than this is a mistake
LEADER = "@leader"  # a target resolved when injected: the coordinator leader of that moment
# "@leader-of:<table>": the tablet server leading most of that table's tablets when injected.
TABLET_LEADER_OF = "@leader-of:"
HOLD_S_MIN = 2.0  # how long a fault holds, drawn in [HOLD_S_MIN, HOLD_S_MAX]
HOLD_S_MAX = 6.0
QUIET_S_MIN = 1.0  # the healed gap between two faults
QUIET_S_MAX = 4.0


@dataclass(frozen=True, slots=True)
class Step:
    """One fault: at `offset_s` after the workload starts, `kind` does `action` to
    `targets` (node names, LEADER, or groups of names joined by ','), healed `hold_s`
    later."""

    offset_s: float
    kind: str
    action: str
    targets: tuple[str, ...]
    hold_s: float

    def describe(self) -> str:
        what = f"{self.kind}:{self.action} {list(self.targets)}"
        return f"+{self.offset_s:6.2f}s {what} ({self.hold_s:.1f}s)"


class Fault(Protocol):
    """What every fault kind implements (net.NetFault, runner.PauseFault, power.PowerFault)."""

    kind: str

    def choose(self, rng: random.Random, nodes: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        """One step's (action, targets), drawn from `rng` only (the schedule is replayable)."""
        ...

    def inject(self, step: Step) -> Step:
        """Apply the step to the running cluster (returns once it is in force); returns
        it as applied: a symbolic target (LEADER) resolved to the node it named then."""
        ...

    def heal(self) -> None:
        """Undo everything this fault did; safe to call twice and with nothing injected."""
        ...


@dataclass(frozen=True, slots=True)
class Schedule:
    seed: int
    duration_s: float
    steps: tuple[Step, ...]

    @staticmethod
    def make(
        seed: int, duration_s: float, faults: Sequence[Fault], nodes: Sequence[str]
    ) -> Schedule:
        """Faults one at a time, each healed before the next: quiet gap, fault, hold, heal.
        The last fault is healed at least QUIET_S_MIN before `duration_s`."""
        assert faults and nodes and duration_s > 0
        rng = random.Random(seed)
        steps: list[Step] = []
        t = rng.uniform(QUIET_S_MIN, QUIET_S_MAX)
        while len(steps) < STEPS_MAX:
            hold_s = round(rng.uniform(HOLD_S_MIN, HOLD_S_MAX), 3)
            if t + hold_s + QUIET_S_MIN > duration_s:
                break
            fault = faults[rng.randrange(len(faults))]
            action, targets = fault.choose(rng, list(nodes))
            steps.append(Step(round(t, 3), fault.kind, action, tuple(targets), hold_s))
            t += hold_s + rng.uniform(QUIET_S_MIN, QUIET_S_MAX)
        return Schedule(seed, duration_s, tuple(steps))

    def to_json(self) -> str:
        return json.dumps(
            {"seed": self.seed, "duration_s": self.duration_s,
             "steps": [asdict(s) for s in self.steps]},
            indent=1,
        )  # fmt: skip

    @staticmethod
    def load(path: Path) -> Schedule:
        raw = json.loads(path.read_text())
        steps = tuple(
            Step(s["offset_s"], s["kind"], s["action"], tuple(s["targets"]), s["hold_s"])
            for s in raw["steps"]
        )
        assert len(steps) <= STEPS_MAX
        return Schedule(int(raw["seed"]), float(raw["duration_s"]), steps)
