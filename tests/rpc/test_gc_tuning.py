"""`observe.quiet_old_generation` (issue 28): a tablet server of 10,000 replicas collected
its old generation every 20-35 s, each time holding the interpreter 0.5-1.2 s and finding
nothing. The same churn of short-lived objects beside a large long-lived heap, in a child
process (thresholds are process-wide): CPython's default collects the old generation many
times, the daemon's setting at most once."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import gc, sys
    sys.path.insert(0, {root!r})
    from rpc import observe
    if sys.argv[1] == "quiet":
        observe.quiet_old_generation()
    gc.collect()
    kept = [{{"k": [i]}} for i in range(300_000)]  # lives as long as the process
    before = gc.get_stats()[2]["collections"]
    for round_ in range(400):  # churn: short-lived objects, a few kept a while
        batch = [[j] for j in range(5_000)]
        kept.append(batch[:50])
    print(gc.get_stats()[2]["collections"] - before)
    """
)


def _old_collections(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=str(ROOT)), mode],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return int(out.stdout.strip())


def test_the_old_generation_is_collected_seldom():
    default = _old_collections("default")
    quiet = _old_collections("quiet")
    assert default >= 3, f"the churn made only {default} old collections by default"
    assert quiet <= 1, f"{quiet} old collections with quiet_old_generation ({default} by default)"
