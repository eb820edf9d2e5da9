"""The replay thread: applies the coordinator log to the catalog in id order.

Every node runs one. Followers use it to keep their catalog current; a node that becomes
leader uses `apply_through(epoch)` to reach the tail before recovery (`Engine._recover`), and
the leader applies its own records through `apply_own`, which first applies anything before
them (lease renewals appended by the lease driver). All applying is serialized by one lock,
and `catalog.applied_id` only grows.

Reading only live records, a replay that lags can miss a record that was invalidated before it
was read, and with it that record's own invalidations of records already applied (a DONE that
a later DropTable made moot). The catalog must still equal a replay of the live log from
scratch, so after reading past any such gap the replay checks that every record the catalog
rests on is still live, and rebuilds the catalog from the live log if one is not.
"""

from __future__ import annotations

import logging
import threading
import time

from coordinator.catalog import Catalog
from coordinator.leases.driver import LOG_NAME
from coordinator.ops import apply_record, decode
from logstore.api import LogStore, read_live
from rpc.errors import RpcError, Unavailable
from rpc.protocols import coordinator_pb2 as pb

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
        # One beyond the highest id a read found invalidated before it got there (0: none).
        self._unchecked_below = 0
        self.rebuilds = 0  # catalog rebuilds from the live log (see _rests_on_dead_records)

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
            complete = len(entries) < READ_CHUNK_ENTRIES
            end = upto + 1 if complete else entries[-1].id + 1  # this read covers [start, end)
            if len(entries) < end - start:  # ids increase: fewer than the span means a gap
                # Kept until checked: a store error in the check must not lose the gap.
                self._unchecked_below = max(self._unchecked_below, end)
            with catalog.lock:
                for e in entries:
                    if e.id > catalog.applied_id:
                        apply_record(catalog, e.id, decode(e.data))
                if complete:
                    # Everything up to `upto` that is live has been read; the rest was
                    # invalidated (or never had data) and has nothing to apply.
                    catalog.applied_id = max(catalog.applied_id, upto)
                catalog.changed.notify_all()
        if self._unchecked_below:
            if self._rests_on_dead_records(self._unchecked_below):
                self._rebuild()
            self._unchecked_below = 0
        return catalog.applied_id

    def verify(self) -> bool:
        """Check every record the catalog rests on is live, rebuilding if one is not (a new
        leader does this before it acts on its catalog). True if it rebuilt."""
        with self._lock:
            rebuild = self._rests_on_dead_records(self.catalog.applied_id + 1)
            if rebuild:
                self._rebuild()
            self._unchecked_below = 0  # every gap so far lies below what was checked
            return rebuild

    def _rests_on_dead_records(self, below: int) -> bool:
        """Whether a record the catalog rests on, with id < below, is dead unexplained.

        Records the replay skipped (invalidated before it read them) may themselves have
        invalidated records it had applied; their changes are then missing from the
        catalog (seed 003's replay must equal a replay of the live log from scratch). A dead
        record that a live record not yet applied invalidated is explained: applying that
        record handles it, as at the leader (its own DONE, appended before it applies it)."""
        with self.catalog.lock:
            refs = {r for r in self.catalog.record_refs() if r < below}
            applied = self.catalog.applied_id
        if not refs:
            return False
        live: set[int] = set()
        pending_invalidations: set[int] = set()
        for e in read_live(self.store, self.log, min(refs), chunk=READ_CHUNK_ENTRIES):
            live.add(e.id)
            if e.id > applied:
                pending_invalidations.update(e.invalidates)
        return bool(refs - live - pending_invalidations)

    def _rebuild(self) -> None:
        """Replay the live log from scratch through the applied id, then adopt the result."""
        through = self.catalog.applied_id
        logger.warning(
            "replay: a record applied earlier was invalidated by one never read; "
            "rebuilding the catalog from the live log through %d",
            through,
        )
        fresh = Catalog()
        for e in read_live(self.store, self.log, through=through, chunk=READ_CHUNK_ENTRIES):
            apply_record(fresh, e.id, decode(e.data))
        fresh.applied_id = through
        with self.catalog.lock:
            self.catalog.adopt_logged(fresh)
            self.catalog.changed.notify_all()
        self.rebuilds += 1

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
