"""An idle server's I/O thread sleeps until a request or close() (rpc/server.py `_io_loop`;
issue 28): it used to wake every 50 ms (a receive with a timeout, to look at the stop flag),
about 0.2% of a core per idle server on a small VM. Counted by the thread's voluntary
context switches (Linux /proc), not by time: each timed-out wait is one, so the old loop
made about 20 in the window below whatever the machine's load, the new one none."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rpc.client import RpcClient
from rpc.rpc_pb2 import PingRequest, PingResponse
from rpc.server import PING_METHOD, RpcServer

UUID = "idle-io-server"
WINDOW_S = 1.0  # observed, not waited on: nothing is expected to happen in it


def _switches(tid: int) -> int:
    for line in Path(f"/proc/self/task/{tid}/status").read_text().splitlines():
        if line.startswith("voluntary_ctxt_switches:"):
            return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="Linux /proc")
def test_an_idle_server_io_thread_does_not_wake_up():
    server = RpcServer(UUID).start()
    try:
        with RpcClient(server.address) as client:
            for _ in range(3):  # the loop served calls, and is idle again after each
                assert client.call(UUID, PING_METHOD, PingRequest(), PingResponse).uuid == UUID
            io = server._io_thread
            assert io is not None and io.native_id is not None
            before = _switches(io.native_id)
            time.sleep(WINDOW_S)
            woke = _switches(io.native_id) - before
            # The thread may finish the turn of the last call within the window: one.
            assert woke <= 1, f"the idle I/O thread woke {woke} times in {WINDOW_S} s"
            # Still serving, and close() wakes it at once.
            assert client.call(UUID, PING_METHOD, PingRequest(), PingResponse).uuid == UUID
    finally:
        closer = threading.Thread(target=server.close)
        closer.start()
        closer.join(30)
    assert not closer.is_alive() and not server._io_thread.is_alive()
