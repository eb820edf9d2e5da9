"""In-memory logstore for unit tests of pure cores (coordinator ops, leases).

It passes the same contract suite as the replicated store (tests/logstore/test_contract.py).
Thread-safe; nothing is durable.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from logstore.api import (
    ENTRY_BYTES_MAX,
    LOG_NAME_BYTES_MAX,
    READ_LIMIT_MAX,
    Entry,
    LogConditionFailed,
)
from rpc.errors import BadRequest


def validate_append(
    logs: dict[str, dict[int, Entry]],
    last_ids: dict[str, int],
    log: str,
    data: bytes,
    expected_id: int | None,
    invalidates: Sequence[int],
) -> None:
    """Checks shared by every implementation's state machine; raises without changing state."""
    if not log or len(log.encode()) > LOG_NAME_BYTES_MAX:
        raise BadRequest(f"log name must be 1..{LOG_NAME_BYTES_MAX} bytes")
    if len(data) > ENTRY_BYTES_MAX:
        raise BadRequest(f"entry of {len(data)} bytes exceeds {ENTRY_BYTES_MAX}")
    last = last_ids.get(log, 0)
    if expected_id is not None and expected_id != last + 1:
        raise LogConditionFailed(
            f"expected id {expected_id} but the next id of {log!r} is {last + 1}", last_id=last
        )
    live = logs.get(log, {})
    if len(set(invalidates)) != len(invalidates):
        raise BadRequest("an id is invalidated twice in one entry")
    for i in invalidates:
        if i not in live:
            raise BadRequest(f"cannot invalidate {log!r}#{i}: no live entry with that id")


class MemoryLogStore:
    """A dict of logs; each log maps id -> live Entry."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._logs: dict[str, dict[int, Entry]] = {}
        self._last: dict[str, int] = {}

    def append(
        self,
        log: str,
        data: bytes,
        expected_id: int | None = None,
        invalidates: Sequence[int] = (),
        timeout_s: float = 5.0,
    ) -> int:
        invalidates = tuple(invalidates)
        with self._lock:
            validate_append(self._logs, self._last, log, data, expected_id, invalidates)
            new_id = self._last.get(log, 0) + 1
            live = self._logs.setdefault(log, {})
            for i in invalidates:
                del live[i]
            if data:
                live[new_id] = Entry(new_id, bytes(data), invalidates)
            self._last[log] = new_id
            self._lock.notify_all()
            return new_id

    def read(
        self, log: str, from_id: int = 1, limit: int = 1000, timeout_s: float = 5.0
    ) -> list[Entry]:
        if limit <= 0 or limit > READ_LIMIT_MAX:
            raise BadRequest(f"limit must be 1..{READ_LIMIT_MAX}")
        with self._lock:
            live = self._logs.get(log, {})
            ids = sorted(i for i in live if i >= from_id)[:limit]
            return [live[i] for i in ids]

    def last_id(self, log: str, timeout_s: float = 5.0) -> int:
        with self._lock:
            return self._last.get(log, 0)

    def barrier(self, timeout_s: float = 5.0) -> None:
        return None

    def close(self) -> None:
        return None

    def __enter__(self) -> MemoryLogStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
