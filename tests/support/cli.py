"""Running the project's commands as a user does: a child process, with a deadline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMAND_TIMEOUT_S = 120.0  # a command that hangs instead of failing fails the test here


def run_cli(
    module: str, *args: str, timeout_s: float = COMMAND_TIMEOUT_S
) -> subprocess.CompletedProcess:
    """`python -m module args...` from the repository root; output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def assert_usage_error(out: subprocess.CompletedProcess, prog: str, words: str) -> None:
    """Bad usage: exit status 2, no traceback, the last line an argparse error naming
    `words`."""
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(prog) and "error:" in last and words in last, out.stderr
