"""Freed big buffers back to the kernel: glibc's malloc with few arenas, trimmed after
large scans.

glibc's malloc serves a request of at least its mmap threshold (128 KiB at start) with a
mapping of its own, unmapped when freed. But the threshold is *dynamic*: when such a chunk
is freed, the threshold rises to its size (up to 32 MiB), so from then on buffers of that
size come from the heaps of an arena and, freed, stay there. A tablet server's scan answers
are such buffers (up to 16 MiB, from `pa.system_memory_pool()`, made by any of the rpc
workers and freed by the rpc I/O thread once sent), and each thread gets an arena of its
own (up to 8 per core): after the scans of a 50M-row tablet the server kept 627 MiB of heap
(RssAnon) with no scan running and Arrow's pools holding nothing (design/storage.md, "The
scan's heap"). `malloc_trim` hands back free pages inside every arena's heaps, but the
free top of a thread arena's heap only above the trim threshold (dynamic too).

Measured with 8 threads making 4-16 MiB buffers that another frees (tests/rpc/test_heap.py),
RssAnon after / after a trim, MiB: default 507 / 300; 2 arenas 412 / 64; 1 arena 160 / 40;
the mmap threshold fixed at 1 MiB 10 (no trim needed, but every answer buffer is then
mapped and zero-filled afresh: full scans of a 5M-row tablet ran ~15-20% slower). So a
tablet server limits malloc to ARENAS_MAX arenas at start (`limit_arenas`: its threads
share them; Python's small objects have their own allocator, Arrow's data mimalloc) and
trims after a large scan (`trim`, about a millisecond).

Not glibc (musl, macOS): nothing to do, and both say so by returning False.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "malloc_trim"):
        return None
    libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    libc.malloc_trim.restype = ctypes.c_int
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc


def trim() -> bool:
    """Hand the free memory of every arena of glibc's malloc back to the kernel
    (`malloc_trim(0)`). False when the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS_MAX = 2


def limit_arenas(arenas: int = ARENAS_MAX) -> bool:
    """At most `arenas` malloc arenas for the process's threads (`mallopt(M_ARENA_MAX)`);
    for a daemon's `main`, before it starts threads. False when not glibc or refused."""
    libc = _glibc()
    if libc is None:
        return False
    return libc.mallopt(M_ARENA_MAX, int(arenas)) == 1
