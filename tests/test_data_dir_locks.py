"""One process per data dir: a second logstore replica or coordinator node started on a
live one's directory is refused before it touches a file, and the lock dies with its
holder (kill -9 included), so a restart after a crash is never refused."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rpc.addresses import free_port
from tests.support.cli import REPO, run_cli
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration


def _start(argv: list[str], out: Path) -> subprocess.Popen:
    with open(out, "w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", *argv], cwd=REPO, stdout=f, stderr=subprocess.STDOUT
        )


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(30)


def _logstore_argv(d: Path) -> list[str]:
    raft = f"127.0.0.1:{free_port()}"
    return ["logstore.cli", "serve", "--raft-address", raft, "--data-dir", str(d),
            "--insecure-dev"]  # fmt: skip


def _coordinator_argv(d: Path) -> list[str]:
    return ["coordinator.cli", "start", "--id", "c0", "--data-dir", str(d),
            "--bind", f"127.0.0.1:{free_port()}", "--raft", f"127.0.0.1:{free_port()}",
            "--insecure-dev"]  # fmt: skip


@pytest.mark.parametrize(
    "argv_of,ready,holder",
    [
        (_logstore_argv, "logstore serving", "logstore"),
        (_coordinator_argv, "serving on", "coordinator c0"),
    ],
    ids=["logstore", "coordinator"],
)
def test_a_second_process_on_a_live_data_dir_is_refused(tmp_path, argv_of, ready, holder):
    d = tmp_path / "node"
    first = _start(argv_of(d), tmp_path / "first.out")
    try:
        wait_for(
            lambda: first.poll() is not None or ready in (tmp_path / "first.out").read_text(),
            60,
            "the first process serving",
        )
        assert first.poll() is None, (tmp_path / "first.out").read_text()
        before = _files(d)
        out = run_cli(*argv_of(d))
        assert out.returncode == 1, (out.returncode, out.stderr)
        last = out.stderr.strip().splitlines()[-1]
        assert "in use by another process" in last and f"{first.pid} {holder}" in last, last
        assert "Traceback" not in out.stderr
        # Refused before touching anything: the live one's files are as they were (its own
        # writes aside: it is idle, a single node whose lease renewals are invalidated).
        after = _files(d)
        assert set(after) == set(before)
        for name in ("logstore/journal.meta", "journal.meta", "coordinator-uuid"):
            if name in before:
                assert after[name] == before[name], name
        # kill -9 of the holder: the lock goes with it, the restart is not refused.
        _stop(first, signal.SIGKILL)
        second = _start(argv_of(d), tmp_path / "second.out")
        try:
            wait_for(
                lambda: second.poll() is not None or ready in (tmp_path / "second.out").read_text(),
                60,
                "the restart serving",
            )
            assert second.poll() is None, (tmp_path / "second.out").read_text()
        finally:
            _stop(second)
    finally:
        _stop(first, signal.SIGKILL)
