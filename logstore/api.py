"""The one client interface of logstore, shared by every implementation.

Semantics (design/logstore.md; the contract suite in tests/logstore/ checks each of them
against every implementation):
- A store holds named logs. Entry ids in a log start at 1; `last_id` of an empty log is 0.
- `append(log, data, expected_id=None, invalidates=())`: with `expected_id`, succeeds only if
  `expected_id == last_id + 1`, else raises ConditionFailed carrying the current last id
  (`err.last_id`) and changes nothing. Every invalidated id must exist and be live, else
  BadRequest and no change. An invalidation-only entry is an append with empty data.
- `read(log, from_id=1, limit)` returns the live entries with id >= from_id in id order.
- `barrier()`: after it returns, this replica has applied every entry acknowledged before.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rpc.errors import ConditionFailed

LOG_NAME_BYTES_MAX = 255
ENTRY_BYTES_MAX = 4 << 20
READ_LIMIT_MAX = 100_000
# Ids an append may invalidate at once (the coordinator invalidates a handful), and the
# magnitude of every id in an append (the wire carries uint64): with these, an append's
# Raft command has a size bound, and so has every Raft frame (logstore/replicated.py).
INVALIDATES_MAX = 4096
APPEND_ID_ABS_LIMIT = 1 << 64


@dataclass(frozen=True, slots=True)
class Entry:
    id: int
    data: bytes
    # Ids this entry invalidated when it was appended (kept for inspection tools).
    invalidates: tuple[int, ...] = ()


class LogConditionFailed(ConditionFailed):
    """CONDITION_FAILED with the log's current last id."""

    def __init__(self, message: str, last_id: int, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.last_id = last_id


@runtime_checkable
class LogStore(Protocol):
    def append(
        self,
        log: str,
        data: bytes,
        expected_id: int | None = None,
        invalidates: Sequence[int] = (),
        timeout_s: float = 5.0,
    ) -> int: ...

    def read(
        self, log: str, from_id: int = 1, limit: int = 1000, timeout_s: float = 5.0
    ) -> list[Entry]: ...

    def last_id(self, log: str, timeout_s: float = 5.0) -> int: ...

    def barrier(self, timeout_s: float = 5.0) -> None: ...

    def close(self) -> None: ...


def read_live(
    store: LogStore, log: str, from_id: int = 1, through: int | None = None, chunk: int = 1000
) -> Iterator[Entry]:
    """The live entries with from_id <= id (<= through, or to the tail), in id order, read
    `chunk` at a time. Each read starts past the last id returned, so it always advances."""
    start = from_id
    while True:
        entries = store.read(log, from_id=start, limit=chunk)
        for e in entries:
            if through is not None and e.id > through:
                return
            yield e
        if len(entries) < chunk:
            return
        start = entries[-1].id + 1
