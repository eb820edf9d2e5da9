"""Named crash points of the coordinator's operations (architecture 4.3).

There is a point before and after every append and every tablet-server call of every
operation, named `<operation>.<before|after>_<step>`, e.g. `create_table.after_commit_point`
or `drop_table.before_delete_tablet`. A test arms one through the environment variable
COORDINATOR_CRASH_POINT (`name`, or `name:N` for the N-th time the point is reached); the
process then exits at once with CRASH_EXIT_STATUS, without cleanup, like a kill -9 at that
instruction.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

ENV_VAR = "COORDINATOR_CRASH_POINT"
CRASH_EXIT_STATUS = 86

# Operation -> its tablet-server call (None: no call, single-phase operation; "": two
# phases without a call, points at the commit point and at DONE only).
_CALLS: dict[str, str | None] = {
    "create_table": "create_tablet",
    "drop_table": "delete_tablet",
    "alter_table": "alter_schema",
    "enlist_server": None,
    "server_down": None,
    "remove_server": None,
    "set_replication": None,
    "retire_server": None,
    "principal": "",
}


def points_of(operation: str) -> tuple[str, ...]:
    """Every crash point of one operation, in the order the operation reaches them."""
    steps = ["commit_point"]
    call = _CALLS[operation]
    if call:
        steps += [call, "done"]
    elif call == "":
        steps += ["done"]
    out = []
    for step in steps:
        out += [f"{operation}.before_{step}", f"{operation}.after_{step}"]
    return tuple(out)


ALL_POINTS: frozenset[str] = frozenset(p for op in _CALLS for p in points_of(op))


def parse(spec: str) -> tuple[str, int]:
    """`name` or `name:N` -> (name, N). Raises ValueError for an unknown name or bad N."""
    name, _, nth = spec.partition(":")
    if name not in ALL_POINTS:
        raise ValueError(f"unknown crash point {name!r}; known: {', '.join(sorted(ALL_POINTS))}")
    n = int(nth) if nth else 1
    if n < 1:
        raise ValueError(f"crash point count must be >= 1, got {n}")
    return name, n


@dataclass
class CrashPoints:
    """The armed point (if any) and how many times it has been reached."""

    armed: str | None = None
    nth: int = 1
    exit: Callable[[int], object] = os._exit
    hits: int = field(default=0, init=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> CrashPoints:
        spec = environ.get(ENV_VAR, "")
        if not spec:
            return cls()
        name, nth = parse(spec)
        logger.warning("crash point armed: %s (hit %d)", name, nth)
        return cls(name, nth)

    def hit(self, name: str) -> None:
        assert name in ALL_POINTS, f"unknown crash point {name!r}"
        if name != self.armed:
            return
        self.hits += 1
        if self.hits >= self.nth:
            logger.critical("crash point %s reached: exiting with %d", name, CRASH_EXIT_STATUS)
            for handler in logging.getLogger().handlers:
                handler.flush()
            self.exit(CRASH_EXIT_STATUS)
