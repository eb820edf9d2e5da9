"""Big buffers freed go back to the kernel: the C allocator's mmap threshold, fixed.

glibc's malloc serves a request of at least its mmap threshold (128 KiB at start) with a
mapping of its own, unmapped when freed. But the threshold is *dynamic*: when such a chunk
is freed, the threshold rises to its size (up to 32 MiB), so from then on buffers of that
size come from the heaps of the allocating thread's arena and, freed, stay there. A tablet
server's scan answers are such buffers (up to 16 MiB, from `pa.system_memory_pool()`, made
by any of the rpc workers and freed by the rpc I/O thread once sent): after the scans of a
50M-row tablet the server kept 627 MiB of heap (RssAnon) with no scan running and Arrow's
pools holding nothing (design/storage.md, "Heap kept after scans"); an in-process
reproduction (8 threads, 4-16 MiB buffers freed by another thread) kept 704 MiB, 10 MiB
with the threshold fixed. `mallopt(M_MMAP_THRESHOLD, n)` sets it and turns the dynamic
adjustment off (glibc's mallopt(3)): every buffer of at least n bytes is mapped and unmapped
on its own, so a process's heap holds what is live plus small chunks.

Process-wide: for a daemon's `main` (the tablet server's). Not glibc (musl, macOS): nothing
to do, and `fix_mmap_threshold` says so by returning False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
# 1 MiB: far below an answer's 16 MiB and a flush's or a slab's buffers, far above the
# small allocations of Python objects, protobuf messages and zmq frames of short calls.
MMAP_THRESHOLD_BYTES = 1 << 20


def fix_mmap_threshold(threshold_bytes: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold at `threshold_bytes` (the dynamic threshold off); False
    when the C library has no such setting (not glibc) or refused it."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    if not hasattr(libc, "gnu_get_libc_version"):
        return False  # another libc's mallopt may take other parameters
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = mallopt(M_MMAP_THRESHOLD, int(threshold_bytes)) == 1
    if not ok:
        log.warning("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold_bytes)
    return ok
