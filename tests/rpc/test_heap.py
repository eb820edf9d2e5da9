"""Freed big buffers leave the process after `rpc.heap.trim` (called at the end of a large
scan): with glibc's dynamic mmap threshold a 16 MiB buffer freed once makes later ones come
from the allocating thread's arena, where they stay when freed (627 MiB of a tablet
server's heap after the scans of a 50M-row tablet, no scan running). Real processes, the
real C allocator: buffers of the size of scan answers made by 8 threads (the rpc workers)
and freed by another (the rpc I/O thread)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tservers.procs import REPO

PATTERN = r"""
import ctypes, queue, sys, threading
import pyarrow as pa
from rpc import heap
if sys.argv[1] == "trimmed":
    assert heap.limit_arenas()  # as `tserver start` does first
pool = pa.system_memory_pool()  # the answers' pool (tservers/service.py)
freed = queue.Queue()
def freer():
    while (b := freed.get()) is not None:
        del b
def worker(i):
    for k in range(24):
        size = (4 + (k * 7 + i) % 13) << 20
        buf = pa.allocate_buffer(size, memory_pool=pool)
        ctypes.memset(buf.address, 1, size)  # every page touched, as an answer's are
        freed.put(buf)
        del buf
f = threading.Thread(target=freer)
f.start()
ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
freed.put(None)
f.join()
if sys.argv[1] == "trimmed":
    assert heap.trim()
anon = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("RssAnon"))
print(anon // 1024)
"""


def _heap_mib_after(mode: str) -> int:
    out = subprocess.run(
        [sys.executable, "-c", PATTERN, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(out.stdout.split()[-1])


def _glibc() -> bool:
    import ctypes

    return hasattr(ctypes.CDLL(None), "gnu_get_libc_version")


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt")
def test_freed_answers_leave_the_heap_when_trimmed():
    # The pattern keeps hundreds of MiB with the dynamic threshold (704 MiB measured with
    # 40 buffers a thread): the check below can tell the two apart.
    kept = _heap_mib_after("kept")
    trimmed = _heap_mib_after("trimmed")
    assert kept > 200, f"the dynamic threshold kept only {kept} MiB: no retention to show"
    assert trimmed < 100, f"{trimmed} MiB of heap kept after a trim ({kept} without)"
