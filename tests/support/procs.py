"""Helpers for tests that start processes and sockets: free ports and bounded waits."""

from __future__ import annotations

import time
from collections.abc import Callable

from rpc.addresses import free_port

__all__ = ["free_port", "wait_for"]


def wait_for(
    condition: Callable[[], object], timeout_s: float, what: str, interval_s: float = 0.01
):
    """Poll `condition` until it is truthy; fail with `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for: {what}")
        time.sleep(interval_s)
