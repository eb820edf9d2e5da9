"""In-memory logstore for unit tests of pure cores (coordinator ops, leases).

The same state machine as every replica of the replicated store (logstore/state.py's
LogState, so the same checks and outcomes), behind a lock, with nothing replicated or
durable. It passes the same contract suite (tests/logstore/test_contract.py). Thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from logstore.api import Entry
from logstore.state import LogState, check_append_request, outcome_id


class MemoryLogStore:
    """One LogState; every call applies or reads it under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._state = LogState()

    def append(
        self,
        log: str,
        data: bytes,
        expected_id: int | None = None,
        invalidates: Sequence[int] = (),
        timeout_s: float = 5.0,
    ) -> int:
        check_append_request(log, data, expected_id, tuple(invalidates))
        with self._lock:
            outcome = self._state.apply_append(log, bytes(data), expected_id, tuple(invalidates))
        return outcome_id(outcome)

    def read(
        self, log: str, from_id: int = 1, limit: int = 1000, timeout_s: float = 5.0
    ) -> list[Entry]:
        with self._lock:
            return self._state.read(log, from_id, limit)

    def last_id(self, log: str, timeout_s: float = 5.0) -> int:
        with self._lock:
            return self._state.last_id(log)

    def barrier(self, timeout_s: float = 5.0) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> MemoryLogStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
