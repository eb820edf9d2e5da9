"""Reused answer buffers (rpc/sendbuffers.py) and answers not kept by the rpc workers.

A mapping is handed out again only once nothing references the view of it (zmq sent the
answer and let go), the pool holds at most `bytes_max`, and what it keeps unused for
`idle_s` is unmapped. And an rpc worker does not keep its last call's answer alive: before
(session 27), each of a server's workers held its last answer's buffers until it took
another call, so a scan's buffers were never free for the next scan, and an idle tablet
server kept up to 8 answers of 16 MiB."""

from __future__ import annotations

import gc
import mmap
import time
import weakref

import pyarrow as pa
import pytest

from rpc.client import RpcClient
from rpc.rpc_pb2 import PingResponse
from rpc.sendbuffers import SIZE_MAX, SIZE_MIN, SendBuffers
from rpc.server import Reply, RpcServer

SERVER_UUID = "11111111-2222-3333-4444-555555555555"
MIB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def until(cond, timeout_s: float = 10.0) -> bool:
    """Poll `cond` until true or the deadline (bounded; not a timing figure)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gc.collect()
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_a_mapping_is_lent_again_only_once_every_view_of_it_is_gone():
    pool = SendBuffers(bytes_max=8 * MIB, idle_s=1000, clock=Clock())
    try:
        a = pool.get(MIB)
        assert a is not None and a.size == MIB and a.is_mutable
        pa.FixedSizeBufferWriter(a).write(b"A" * MIB)
        held = memoryview(a)[:10]  # what zmq holds while it sends
        addr = a.address
        del a
        b = pool.get(MIB)  # the first is still referenced: another mapping
        assert b is not None and b.address != addr
        pa.FixedSizeBufferWriter(b).write(b"B" * MIB)
        assert bytes(held) == b"A" * 10  # never written while referenced
        del held
        c = pool.get(MIB - 5)  # now the first mapping is free: reused
        assert c is not None and c.address == addr and c.size == MIB - 5
        assert pool.reused == 1 and pool.mapped == 2 and pool.lent == 2
    finally:
        pool.close()


def test_the_pool_holds_at_most_bytes_max_and_declines_sizes_outside_its_classes():
    pool = SendBuffers(bytes_max=4 * MIB, idle_s=1000, clock=Clock())
    try:
        views = [pool.get(MIB) for _ in range(4)]
        assert all(v is not None for v in views)
        assert pool.get(MIB) is None  # 4 MiB held, all lent
        assert pool.get(SIZE_MIN - 1) is None and pool.get(SIZE_MAX + 1) is None
        assert pool.declined == 3 and pool.bytes_held == 4 * MIB
        del views
        assert pool.get(MIB) is not None and pool.bytes_held == 4 * MIB
    finally:
        pool.close()


def test_size_classes():
    assert SendBuffers.size_class(1) == SIZE_MIN
    assert SendBuffers.size_class(SIZE_MIN + 1) == 2 * SIZE_MIN
    assert SendBuffers.size_class(MIB) == MIB
    assert SendBuffers.size_class(MIB + 1) == 2 * MIB


def test_unused_mappings_are_unmapped_after_idle_s():
    clock = Clock()
    pool = SendBuffers(bytes_max=8 * MIB, idle_s=5.0, clock=clock)
    try:
        v = pool.get(2 * MIB)
        w = pool.get(MIB)
        del v
        clock.now += 3
        del w
        assert pool.release_idle() == 0  # 3 s and 0 s unused
        clock.now += 2.5
        assert pool.release_idle() == 2 * MIB  # the first: 5.5 s
        assert pool.bytes_held == MIB
        clock.now += 3
        assert pool.release_idle() == MIB and pool.bytes_held == 0
    finally:
        pool.close()


def test_the_reaper_unmaps_what_an_idle_pool_holds():
    pool = SendBuffers(bytes_max=8 * MIB, idle_s=0.05)
    try:
        v = pool.get(MIB)
        assert v is not None
        del v
        assert until(lambda: pool.bytes_held == 0)
        assert until(lambda: pool._reaper is None)  # it ends with nothing held
        assert pool.get(MIB) is not None  # and starts again
    finally:
        pool.close()


def test_a_view_dropped_after_close_is_unmapped():
    pool = SendBuffers(bytes_max=8 * MIB, idle_s=1000, clock=Clock())
    v = pool.get(MIB)
    free = pool.get(MIB)
    del free
    pool.close()
    assert pool.bytes_held == MIB and pool.get(MIB) is None
    del v
    assert pool.bytes_held == 0


@pytest.mark.parametrize("slow", [False, True])
def test_a_worker_does_not_keep_its_last_answer(slow):
    """The answer's sidecar is released once sent, with no other call after it (a quick
    handler's answer and a slow one's take different paths to the I/O thread)."""
    released = []

    def handler(request: PingResponse, ctx) -> Reply:
        if slow:
            time.sleep(0.06)  # past QUICK_HANDLER_S
        buf = pa.py_buffer(bytearray(256 << 10))
        weakref.finalize(buf, released.append, request.uuid)
        return Reply(PingResponse(uuid=request.uuid), [memoryview(buf)])

    srv = RpcServer(SERVER_UUID, "127.0.0.1:0", service="t", workers=2)
    srv.register("Test.Big", PingResponse, handler)
    with srv, RpcClient(srv.address, "c") as c:
        answer, sidecars = c.call_with_sidecars(
            SERVER_UUID, "Test.Big", PingResponse(uuid="one"), PingResponse
        )
        assert answer.uuid == "one" and len(sidecars[0]) == 256 << 10
        del sidecars
        assert until(lambda: released == ["one"]), released


def _statm_shared_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[2]) * mmap.PAGESIZE


def test_the_pools_pages_are_private_not_shared():
    """A shared anonymous mapping counts in statm's shared field (RssShmem), which the
    tablet server's mapped-pages budget reads as its blocks' pages: the pool's must not."""
    pool = SendBuffers(bytes_max=64 * MIB, idle_s=1000, clock=Clock())
    try:
        before = _statm_shared_bytes()
        v = pool.get(32 * MIB)
        pa.FixedSizeBufferWriter(v).write(b"x" * (32 * MIB))  # every page touched
        assert _statm_shared_bytes() - before < 8 * MIB
    finally:
        pool.close()


def test_no_mapping_to_be_had_declines_and_holds_nothing(monkeypatch):
    """mmap refused (ENOMEM, the map count limit): the caller allocates as before."""
    pool = SendBuffers(bytes_max=8 * MIB, idle_s=1000, clock=Clock())

    def refused(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr("rpc.sendbuffers.mmap.mmap", refused)
    try:
        assert pool.get(MIB) is None
        assert pool.bytes_held == 0 and pool.lent == 0 and pool.declined == 1
    finally:
        pool.close()
