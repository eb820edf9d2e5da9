"""A command whose cleanup after Ctrl-C gets stuck still ends (rpc/console.py
`interruptible`): INTERRUPT_EXIT_S after the Ctrl-C, with the same one line and status 130.
CI once saw `logstore status` stay 180 s after its Ctrl-C with nothing on stderr. A real
process and a real SIGINT; its cleanup waits on a lock nobody releases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

STUCK = """
import faulthandler, signal, sys, threading, time
# What a shell gives a command: Ctrl-C neither ignored nor blocked. A child inherits both
# from the process that starts it (here a pytest worker, whatever its earlier tests did).
signal.signal(signal.SIGINT, signal.default_int_handler)
signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's look when it stays
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


def _why_still_there(proc: subprocess.Popen) -> str:
    """Its signal state and every thread's stack (faulthandler), then it is killed."""
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
        sig = [line for line in status if line.startswith(("Sig", "Shd", "State"))]
        os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    return "\n".join(sig) + "\n" + proc.stderr.read()


def test_a_stuck_cleanup_ends_with_the_one_line_after_the_deadline():
    proc = _interrupt(within=0.5, wait_s=60)
    if proc.returncode is None:
        raise AssertionError(f"still running 60 s after Ctrl-C:\n{_why_still_there(proc)}")
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
