"""Test-only clock-rate skew for the lease driver (the nemesis `clock` fault, issue 26).

A node's lease clock can be made to run at `rate` times time.monotonic(), continuously (a
change of rate re-anchors it, so it never jumps and never runs backwards):

- `LOGCENTRIC_TEST_CLOCK_RATE=1.05`: a fixed rate, read once when the node starts;
- `LOGCENTRIC_TEST_CLOCK_DIR=<dir>`: the rate is the number in `<dir>/<node id>` (while the
  file is missing: LOGCENTRIC_TEST_CLOCK_RATE's, else 1.0), re-read at most every RECHECK_S,
  so the nemesis re-rates a running process by rewriting that file.

Neither variable set: `clock_from_env` returns time.monotonic itself (no cost, no change).

And one deliberately broken build, for the nemesis tests only (tests/nemesis/test_clock.py):
`LOGCENTRIC_TEST_UNSAFE_NO_DRIFT_MARGIN=1` makes the lease driver give up no margin for
drift (a leader serves for the whole lease_timeout_s on its own clock). Unset (always, in
a real deployment: no flag or config reaches it) the margin is LeaseConfig's.
Another, for tests/nemesis/test_pause.py: `LOGCENTRIC_TEST_UNSAFE_SERVE_PAST_LEASE=1` makes a
leader trust its role and not its clock: it keeps serving past its lease's end (after a
SIGSTOP longer than the lease, say) until its next renewal append fails, and learns of that
failure SERVE_PAST_LEASE_LATE_S late (without that delay the window was the renewal's round
trip, a few ms, and three replays of four pauses showed no overlap in a loaded CI run).
Only the lease driver's clock is skewed; timeouts of sockets and waits stay real, as a
drifting oscillator would leave them in the proportions that matter here (design/nemesis.md).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

logger = logging.getLogger(__name__)

RATE_ENV = "LOGCENTRIC_TEST_CLOCK_RATE"
DIR_ENV = "LOGCENTRIC_TEST_CLOCK_DIR"
NO_DRIFT_MARGIN_ENV = "LOGCENTRIC_TEST_UNSAFE_NO_DRIFT_MARGIN"
SERVE_PAST_LEASE_ENV = "LOGCENTRIC_TEST_UNSAFE_SERVE_PAST_LEASE"
SERVE_PAST_LEASE_LATE_S = 0.5
RECHECK_S = 0.02
RATE_MIN = 0.01
RATE_MAX = 100.0
RATE_FILE_BYTES_MAX = 64


class SkewedClock:
    """`base + (monotonic() - base_real) * rate`, re-anchored at each change of rate."""

    def __init__(self, rate: float = 1.0, rate_file: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._base_real = self._base = time.monotonic()
        self._rate = self._default_rate = _checked(rate)
        self._rate_file = rate_file
        self._next_check = float("-inf")

    @property
    def rate(self) -> float:
        return self._rate

    def __call__(self) -> float:
        with self._lock:
            real = time.monotonic()
            if self._rate_file is not None and real >= self._next_check:
                self._next_check = real + RECHECK_S
                rate = _read_rate(self._rate_file, self._rate, self._default_rate)
                if rate != self._rate:
                    self._base += (real - self._base_real) * self._rate
                    self._base_real = real
                    logger.warning("test clock: rate %.4g -> %.4g", self._rate, rate)
                    self._rate = rate
            return self._base + (real - self._base_real) * self._rate


def clock_from_env(node_id: str) -> Callable[[], float]:
    """The lease clock the environment asks for (see the module docstring)."""
    rate_text, rate_dir = os.environ.get(RATE_ENV), os.environ.get(DIR_ENV)
    if not rate_text and not rate_dir:
        return time.monotonic
    rate = _checked(float(rate_text)) if rate_text else 1.0
    clock = SkewedClock(rate, Path(rate_dir) / node_id if rate_dir else None)
    logger.warning("test clock for %s: rate %s, rate file %s", node_id, rate, clock._rate_file)
    return clock


def drift_margin_from_env(margin_s: float) -> float:
    """`margin_s`, or 0 in the test-only broken build (see the module docstring)."""
    if os.environ.get(NO_DRIFT_MARGIN_ENV) == "1":
        logger.warning("BROKEN BUILD (test only): the lease has no drift margin")
        return 0.0
    return margin_s


def serve_past_lease_from_env() -> bool:
    """False, or True in the test-only broken build (see the module docstring)."""
    if os.environ.get(SERVE_PAST_LEASE_ENV) == "1":
        logger.warning("BROKEN BUILD (test only): a leader serves past its lease's end")
        return True
    return False


def _read_rate(path: Path, current: float, missing: float) -> float:
    try:
        with open(path, "rb") as f:
            text = f.read(RATE_FILE_BYTES_MAX).decode().strip()
    except FileNotFoundError:
        return missing
    try:
        return _checked(float(text))
    except ValueError:  # caught mid-rewrite or garbage: keep the rate in force
        return current


def _checked(rate: float) -> float:
    if not RATE_MIN <= rate <= RATE_MAX:
        raise ValueError(f"test clock rate {rate} outside [{RATE_MIN}, {RATE_MAX}]")
    return rate
