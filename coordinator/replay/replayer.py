"""The replay thread: applies the coordinator log to the catalog in id order.

Every node runs one. Followers use it to keep their catalog current; a node that becomes
leader uses `apply_through(epoch)` to reach the tail before recovery (coordinator/replay/
recovery.py), and the leader applies its own records through `apply_own`, which first
applies anything before them (lease renewals appended by the lease driver). All applying is
serialized by one lock, and `catalog.applied_id` only grows.
"""

from __future__ import annotations

import logging
import threading
import time

from coordinator import coordinator_pb2 as pb
from coordinator.catalog import Catalog
from coordinator.leases.driver import LOG_NAME
from coordinator.ops import apply_record, decode
from logstore.api import LogStore
from rpc.errors import RpcError, Unavailable

logger = logging.getLogger(__name__)

READ_CHUNK_ENTRIES = 1000
JOIN_TIMEOUT_S = 5.0


class Replayer:
    def __init__(
        self,
        store: LogStore,
        catalog: Catalog,
        *,
        log: str = LOG_NAME,
        poll_interval_s: float = 0.05,
        name: str = "replay",
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.log = log
        self.poll_interval_s = poll_interval_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._name = name
        self.error: BaseException | None = None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        assert self._thread is None
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(JOIN_TIMEOUT_S)
            assert not self._thread.is_alive(), "replay thread did not stop"
            self._thread = None

    def __enter__(self) -> Replayer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def poke(self) -> None:
        """Read the log now rather than at the next poll."""
        self._wake.set()

    # ------------------------------------------------------------ applying

    def apply_through(self, target: int, timeout_s: float = 5.0) -> int:
        """Apply every live record with id <= target; returns the applied id.

        Raises Unavailable if this replica's log has not reached target before the deadline.
        """
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while True:
                applied = self._apply_available(target)
                if applied >= target:
                    return applied
                if time.monotonic() >= deadline:
                    raise Unavailable(
                        f"log replica at {applied}, behind {target}", retry_after_ms=100
                    )
                time.sleep(0.005)

    def apply_own(self, entry_id: int, record: pb.LogRecord) -> None:
        """The leader applies the record it has just appended (and anything before it)."""
        with self._lock:
            if self.catalog.applied_id < entry_id - 1:
                self._apply_available(entry_id - 1)
            assert self.catalog.applied_id >= entry_id - 1, (self.catalog.applied_id, entry_id)
            with self.catalog.lock:
                if self.catalog.applied_id < entry_id:
                    apply_record(self.catalog, entry_id, record)
                    self.catalog.changed.notify_all()

    def _apply_available(self, target: int) -> int:
        catalog = self.catalog
        last = self.store.last_id(self.log)
        upto = min(target, last)
        for _ in range(1_000_000):
            start = catalog.applied_id + 1
            if start > upto:
                break
            entries = self.store.read(self.log, from_id=start, limit=READ_CHUNK_ENTRIES)
            entries = [e for e in entries if e.id <= upto]
            with catalog.lock:
                for e in entries:
                    if e.id > catalog.applied_id:
                        apply_record(catalog, e.id, decode(e.data))
                if len(entries) < READ_CHUNK_ENTRIES:
                    # Everything up to `upto` that is live has been read; the rest was
                    # invalidated (or never had data) and has nothing to apply.
                    catalog.applied_id = max(catalog.applied_id, upto)
                catalog.changed.notify_all()
        return catalog.applied_id

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                with self._lock:
                    self._apply_available(1 << 62)
            except RpcError as e:
                logger.warning("replay: log store error: %s", e)
            except Exception as e:  # a record we cannot decode or apply: stop applying
                logger.critical("replay stopped at %d: %r", self.catalog.applied_id, e)
                self.error = e
                return
