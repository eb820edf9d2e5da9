"""A command whose cleanup after Ctrl-C gets stuck still ends (rpc/console.py
`interruptible`): INTERRUPT_EXIT_S after the Ctrl-C, with the same one line and status 130.
CI once saw `logstore status` stay 180 s after its Ctrl-C with nothing on stderr. A real
process and a real SIGINT; its cleanup waits on a lock nobody releases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STUCK = """
import sys, threading, time
sys.path.insert(0, {root!r})
from rpc.console import interruptible
held = threading.Lock()
held.acquire()

@interruptible("stuck", exit_within_s={within!r})
def main(argv=None):
    try:
        print("ready", flush=True)
        time.sleep(3600)
    finally:
        held.acquire()  # a cleanup stuck for good
    return 0

sys.exit(main())
"""


def _interrupt(within: float | None, wait_s: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK.format(root=str(ROOT), within=within)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout.readline() == "ready\n"
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        pass
    return proc


def test_a_stuck_cleanup_ends_with_the_one_line_after_the_deadline():
    proc = _interrupt(within=0.5, wait_s=60)
    assert proc.returncode == 130
    assert proc.stderr.read() == "stuck: interrupted\n"


def test_without_the_deadline_the_same_cleanup_stays():
    """The case the deadline is for: the same process with no deadline is still there."""
    proc = _interrupt(within=None, wait_s=3)
    try:
        assert proc.returncode is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
