"""bench/scale.py at a small size (issue 28: "CI runs the bench at a small size only"): two
real local clusters (3 and 6 one-tablet tables, 3 coordinator nodes), every figure printed and
none missing (two failovers of the coordinator leader each), the lookups of both measured in
turns; the full-size figures are in design/consensus.md."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

ROWS = (
    "disk per empty replica (KB)",
    "idle CPU per tserver (% of a core)",
    "idle CPU, busiest coordinator (%)",
    "elections started while idle",
    "restart to all serving, kill -9 (s)",
    "restart to all serving, SIGTERM (s)",
    "of which the stop (s)",
    "create-table p50 (ms)",
    "create-table p99 (ms)",
    "tablet lookups per second, first",
    "the same tables again",
    "coordinator failover, median (s)",
    "the slowest (s)",
    "coordinator restart to catalog (s)",
)


def test_scale_bench_prints_every_figure():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "scale.py"), "--tablets", "6", "--baseline", "3",
         "--samples", "3", "--idle-window-s", "1", "--settle-s", "0", "--restart", "both",
         "--coordinators", "3", "--failovers", "2", "--lookup-rounds", "7",
         "--lookups-per-caller", "1000"],
        capture_output=True, text=True, timeout=500, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    text = out.stdout
    assert "per-tablet fixed costs: 3 against 6 replicas per server" in text, text
    for row in ROWS:
        m = re.search(re.escape(row) + r"\s+(\S+)\s+(\S+)\s+(\S+)", text)
        assert m, f"{row!r} missing:\n{text}"
        base, big = float(m.group(1)), float(m.group(2))
        assert not math.isnan(base) and not math.isnan(big), f"{row}: {m.group(0)}"
    assert "note (" not in text, text  # no phase timed out
    for row in ("tablet lookups per second, first", "the same tables again"):
        lookups = re.search(re.escape(row) + r"\s+(\S+)\s+(\S+)", text)
        assert float(lookups.group(1)) > 0 and float(lookups.group(2)) > 0
    # the two clusters' lookups in turns, a ratio per round; and the control: N's cluster
    # asked for as many tables as the baseline has, in the same rounds
    _ratios_line(text, r"lookups again, N=6 against N=3 pass by pass \(in turns\)")
    _ratios_line(text, r"the control, N=6 asked for 3 tables, against N=3")
    assert re.search(r"coordinator CPU per lookup, medians, N=6 / N=3: \d", text), text
    assert re.search(r"the control's coordinator CPU per lookup, median, N=6: \S+ us", text), text
    # the coordinator's answers built in the first passes: at most one per table (the entries
    # from the creation are stale once a tablet's report names its leader); how many again
    # depends on elections meanwhile
    # the timed creates' steps on the leader (its step metric): each one's mean, `calls` and
    # `done` within `complete`
    for n in (3, 6):
        line = re.search(rf"steps on the coordinator leader, mean ms a create, N={n}: (.*)", text)
        assert line, text
        steps = dict(part.split(" ") for part in line.group(1).split(", "))
        mean = {k: float(v) for k, v in steps.items()}
        assert set(mean) == {"commit_point", "complete", "calls", "done"}, mean
        assert all(v > 0 for v in mean.values()), mean
        assert mean["calls"] + mean["done"] <= mean["complete"], mean
    built = re.search(r"first pass / passes again: N=3 (\d+) / -, N=6 (\d+) / (\d+)", text)
    assert built, text
    assert int(built.group(1)) <= 3 and int(built.group(2)) <= 6, text


def _ratios_line(text: str, label: str) -> None:
    """A line of 7 ratios (one a round), their median and its 95% interval, and a verdict."""
    m = re.search(
        label + r": (.*); median (\S+), 95% interval (\S+)-(\S+): (lower|not lower|higher)\n",
        text,
    )
    assert m, text
    ratios = [float(x) for x in m.group(1).split(", ")]
    assert len(ratios) == 7 and all(r > 0 for r in ratios), ratios
    median, lo, hi = (float(m.group(k)) for k in (2, 3, 4))
    assert min(ratios) <= lo <= median <= hi <= max(ratios), m.group(0)
