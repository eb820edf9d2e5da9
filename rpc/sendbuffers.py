"""Reused buffers for large answers, so that each answer does not fault in fresh pages.

A scan answer's batches are written into buffers of some MiB each, handed to the rpc I/O
thread and sent without a copy (zmq keeps a reference until the bytes are out). Allocated
afresh each time from glibc's malloc (`ANSWER_POOL` in tservers/service.py), a buffer of
that size is a new mapping: every 4 KiB page of it is faulted in and zeroed by the kernel
when the batch is written, and unmapped when freed. For a full scan of a 1M-row tablet of
one run, that writing was 40% of the tablet server's samples (`py-spy`), and trimming
malloc's arenas after the scan another 8% (design/storage.md, "Session 27").

`SendBuffers` keeps anonymous mappings of power-of-two sizes and hands out writable views
of them (`pa.Buffer`s). A view's mapping goes back to the free list when the last
reference to the view is gone (`weakref.finalize`): the answer was sent and zmq let go of
it, so a mapping is never written while anything can still read it. What the pool holds
is bounded (`bytes_max`): past it, and for sizes outside its classes, `get` returns None
and the caller allocates as before. Mappings left unused for `idle_s` are unmapped by a
thread that runs only while the pool holds any, so an idle server keeps none.
"""

from __future__ import annotations

import mmap
import threading
import time
import weakref

import pyarrow as pa

SIZE_MIN = 256 << 10  # smaller buffers: malloc's own heap serves them without a mapping
SIZE_MAX = 32 << 20
BYTES_MAX_DEFAULT = 96 << 20
IDLE_S_DEFAULT = 5.0


class SendBuffers:
    """A bounded pool of anonymous mappings for answers (see the module's docstring)."""

    def __init__(
        self,
        bytes_max: int = BYTES_MAX_DEFAULT,
        idle_s: float = IDLE_S_DEFAULT,
        *,
        clock=time.monotonic,
    ) -> None:
        self.bytes_max = bytes_max
        self.idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._free: dict[int, list[tuple[mmap.mmap, float]]] = {}  # size -> (mapping, freed at)
        self.bytes_held = 0  # mappings the pool holds, free or lent
        self.lent = 0  # views alive
        self._reaper: threading.Thread | None = None
        self._closed = False
        # Counters (metrics, tests): views handed out from a kept mapping / a new one,
        # and requests the pool declined (too big or too small, or over bytes_max).
        self.reused = 0
        self.mapped = 0
        self.declined = 0

    @staticmethod
    def size_class(size: int) -> int:
        return max(SIZE_MIN, 1 << max(0, size - 1).bit_length())

    def get(self, size: int) -> pa.Buffer | None:
        """A writable buffer of exactly `size` bytes, or None (then allocate otherwise)."""
        if size < SIZE_MIN or size > SIZE_MAX:
            with self._lock:
                self.declined += 1
            return None
        cls = self.size_class(size)
        with self._lock:
            if self._closed:
                return None
            free = self._free.get(cls)
            if free:
                mm, _ = free.pop()
                self.reused += 1
            elif self.bytes_held + cls <= self.bytes_max:
                mm = None
                self.bytes_held += cls
                self.mapped += 1
            else:
                self.declined += 1
                return None
            self.lent += 1
            self._start_reaper_locked()
        if mm is None:
            try:
                # Private: a shared anonymous mapping (mmap's default) counts as shared
                # memory (RssShmem), which the tablet server's mapped-pages budget reads as
                # block pages (/proc/self/statm's shared field) and trims.
                mm = mmap.mmap(-1, cls, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            except OSError:  # no mapping to be had (ENOMEM, a map count limit): malloc's
                with self._lock:
                    self.bytes_held -= cls
                    self.lent -= 1
                    self.mapped -= 1
                    self.declined += 1
                return None
        view = pa.py_buffer(memoryview(mm)[:size])
        weakref.finalize(view, self._returned, mm, cls)
        return view

    def _returned(self, mm: mmap.mmap, cls: int) -> None:
        """The last reference to a view is gone: its mapping is free again."""
        with self._lock:
            self.lent -= 1
            if self._closed:
                self.bytes_held -= cls
                _unmap(mm)
                return
            self._free.setdefault(cls, []).append((mm, self._clock()))

    def release_idle(self, now: float | None = None) -> int:
        """Unmap the free mappings unused for idle_s (all with idle_s 0); bytes unmapped."""
        now = self._clock() if now is None else now
        done = []
        with self._lock:
            for cls, free in self._free.items():
                keep = []
                for mm, at in free:
                    if now - at >= self.idle_s:
                        done.append((mm, cls))
                    else:
                        keep.append((mm, at))
                free[:] = keep
            for _, cls in done:
                self.bytes_held -= cls
        for mm, _ in done:
            _unmap(mm)
        return sum(cls for _, cls in done)

    def close(self) -> None:
        """Unmap every free mapping; views still lent are unmapped when they are dropped."""
        with self._lock:
            self._closed = True
            free = [(mm, cls) for cls, lst in self._free.items() for mm, _ in lst]
            self._free.clear()
            self.bytes_held -= sum(cls for _, cls in free)
            self._wake.notify_all()
        for mm, _ in free:
            _unmap(mm)

    def _start_reaper_locked(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = threading.Thread(
                target=self._reap, name="send-buffers-reaper", daemon=True
            )
            self._reaper.start()

    def _reap(self) -> None:
        """While the pool holds mappings: every idle_s / 2, unmap those idle for idle_s."""
        while True:
            with self._lock:
                if self._closed or self.bytes_held == 0:
                    self._reaper = None
                    return
                self._wake.wait(max(0.05, self.idle_s / 2))
            self.release_idle()


def _unmap(mm: mmap.mmap) -> None:
    try:
        mm.close()
    except BufferError:  # a view is still exported (cannot happen once it was returned)
        pass
