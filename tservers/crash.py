"""Named crash points and pause points armed from tests.

A test sets the environment variable ``TSERVER_CRASH_POINT`` to a point's name (or several,
comma-separated); a process reaching an armed point exits at once with ``CRASH_EXIT_CODE``,
without flushing or cleaning anything up, like a kill -9 at that exact step.

A pause point holds a thread at a step until the test lets it go, so that a test can look
at the state in between without depending on timing: ``TSERVER_PAUSE_POINT`` names the
armed points, ``TSERVER_PAUSE_DIR`` a directory; a thread reaching an armed point with a key
(say a tablet id) waits until the file ``<dir>/<point>`` (every key) or ``<dir>/<point>.<key>``
(that key only) exists, at most ``PAUSE_MAX_S``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

CRASH_ENV = "TSERVER_CRASH_POINT"
CRASH_EXIT_CODE = 86
PAUSE_ENV = "TSERVER_PAUSE_POINT"
PAUSE_DIR_ENV = "TSERVER_PAUSE_DIR"
PAUSE_MAX_S = 600.0
PAUSE_POLL_S = 0.05

# Every point the tablet server knows, so that tests can iterate over them.
DELETION_POINTS = tuple(f"delete.after_step_{n}" for n in range(1, 7))
POINTS = (
    *DELETION_POINTS,
    "delete.after_move_data",
    "startup.after_roll_forward",
    "copy.after_copying_superblock",
    "copy.after_cmeta",
    "copy.after_wal",
    "copy.after_data",
    "copy.after_ready_superblock",
    "flush.after_block_write",
    "flush.after_superblock",
    "compact.after_block_write",
    "compact.after_superblock",
    "wal.after_append_before_sync",
    "write.after_sync_before_apply",
)
PAUSE_POINTS = (
    # Each tablet opened at start-up, just before it is opened (key: the tablet id).
    "startup.before_open_tablet",
)


def crash_point(name: str) -> None:
    """Exit the process here if a test armed `name`."""
    assert name in POINTS, f"unknown crash point {name}"
    armed = os.environ.get(CRASH_ENV)
    if armed and name in armed.split(","):
        sys.stderr.write(f"crash point {name} reached: exiting with {CRASH_EXIT_CODE}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)


def pause_point(name: str, key: str = "") -> None:
    """Wait here, if a test armed `name`, until the test's release file exists."""
    assert name in PAUSE_POINTS, f"unknown pause point {name}"
    armed = os.environ.get(PAUSE_ENV)
    if not armed or name not in armed.split(","):
        return
    directory = Path(os.environ.get(PAUSE_DIR_ENV) or ".")
    releases = [directory / name] + ([directory / f"{name}.{key}"] if key else [])
    sys.stderr.write(f"pause point {name} ({key}) reached: waiting for {releases[-1]}\n")
    sys.stderr.flush()
    deadline = time.monotonic() + PAUSE_MAX_S
    while not any(p.exists() for p in releases) and time.monotonic() < deadline:
        time.sleep(PAUSE_POLL_S)
