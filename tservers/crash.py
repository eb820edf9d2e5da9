"""Named crash points armed from tests.

A test sets the environment variable ``TSERVER_CRASH_POINT`` to a point's name (or several,
comma-separated); a process reaching an armed point exits at once with ``CRASH_EXIT_CODE``,
without flushing or cleaning anything up, like a kill -9 at that exact step.
"""

from __future__ import annotations

import os
import sys

CRASH_ENV = "TSERVER_CRASH_POINT"
CRASH_EXIT_CODE = 86

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


def crash_point(name: str) -> None:
    """Exit the process here if a test armed `name`."""
    assert name in POINTS, f"unknown crash point {name}"
    armed = os.environ.get(CRASH_ENV)
    if armed and name in armed.split(","):
        sys.stderr.write(f"crash point {name} reached: exiting with {CRASH_EXIT_CODE}\n")
        sys.stderr.flush()
        os._exit(CRASH_EXIT_CODE)
