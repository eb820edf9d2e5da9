"""The jobs' entry points answer `--version` as the console scripts do: `PROG VERSION` from
the installed distribution's metadata, exit 0 (before anything starts Spark)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

VERSION = metadata.version("logcentric")


@pytest.mark.parametrize(
    ("module", "prog"), [("jobs.pipeline", "python -m jobs.pipeline"), ("jobs.main", "./dev main")]
)
def test_version_of_the_jobs(module, prog):
    out = subprocess.run(
        [sys.executable, "-m", module, "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{prog} {VERSION}"
