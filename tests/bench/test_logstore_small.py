"""bench/logstore.py at a small size: the embedded leader and `logstore serve` both measured
and their ratio printed. The bench made the embedded replica the leader with an unsigned
hand-over, which the privileged guard (rpc/privileged.py) refuses since it landed: the bench
failed at its first step ("could not make the embedded replica the leader") and nothing ran
it. Now it signs with the group's password, and this runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration


def test_the_logstore_bench_measures_embedded_and_served_appends():
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "logstore.py"), "--skip-plain", "--seconds",
         "0.5", "--latency-samples", "20", "--callers", "1,8"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    text = out.stdout
    for variant in ("logstore embedded", "logstore zmq"):
        row = re.search(rf"^{variant}\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)$", text, re.M)
        assert row, text
        p50, p99, one, eight = (float(row.group(k)) for k in (1, 2, 3, 4))
        assert 0 < p50 <= p99 and one > 0 and eight > 0, row.group(0)
    ratios = re.search(
        r"logstore zmq / logstore embedded: 1 callers x(\S+), 8 callers x(\S+)", text
    )
    assert ratios and all(float(x) > 0 for x in ratios.groups()), text
