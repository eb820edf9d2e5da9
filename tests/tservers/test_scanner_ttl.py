"""Scanners left open expire (issue 25; Kudu's scanner TTL): the scan path keeps state on
the server between calls (the scanner: a generator of pieces over a snapshot of the
tablet's blocks), so an abandoned scanner must not hold its snapshot forever. Here: a
scanner holds the blocks a compaction unlinked (still mapped: their disk space is not
freed), is expired once idle past SCANNER_IDLE_S, a continuation then gets NOT_FOUND, and
the unlinked files are no longer mapped."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pyarrow as pa
import pytest

from rpc import errors
from rpc.protocols.tserver_pb2 import OpType, ScanRequest, WriteRequest
from rpc.server import CallContext
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, create, deadline, ipc, open_manager, six_rows
from tservers import service as service_mod
from tservers.service import TServerService


def mapped_deleted(paths: list[Path]) -> list[str]:
    """Those of `paths` this process still maps although they were unlinked."""
    maps = Path("/proc/self/maps").read_text()
    return [str(p) for p in paths if f"{p} (deleted)" in maps]


def test_an_idle_scanner_expires_and_releases_its_unlinked_blocks(tmp_path, monkeypatch):
    m = open_manager(tmp_path / "root")
    try:
        t = create(m, "t1", SIX)
        assert t.wait_leader_ready(deadline(30))
        service = TServerService(m, lambda: "127.0.0.1:1")

        def ctx(sidecars=()) -> CallContext:
            return CallContext("TServer.Scan", "", time.monotonic() + 30, list(sidecars))

        for start in range(0, 3000, 1000):
            payload = memoryview(ipc(six_rows(range(start, start + 1000))))
            req = WriteRequest(tablet_id="t1", schema_version=1, ops=[OpType.INSERT])
            service.write(req, CallContext("TServer.Write", "", time.monotonic() + 30, [payload]))
            assert t.flush()
        data_dir = m.fs.data_dir("t1")
        old = [data_dir / b.name for b in t.blocks]

        def scan(req: ScanRequest):
            reply = service.scan(req, ctx())
            rows = sum(
                pa.ipc.open_stream(pa.py_buffer(bytes(s))).read_all().num_rows
                for s in reply.sidecars
            )
            return reply.body, rows

        # A scanner left open after its first answer (small batches: many answers to go).
        first, got = scan(ScanRequest(tablet_id="t1", batch_rows_max=10))
        assert first.has_more and first.scanner_id and 0 < got < 3000
        assert t.compact()
        assert not any(p.exists() for p in old)
        assert len(mapped_deleted(old)) == 3  # the scanner's snapshot keeps them mapped
        # Within its TTL it goes on from its snapshot.
        more, got2 = scan(ScanRequest(scanner_id=first.scanner_id))
        assert more.has_more and got2 > 0
        # Idle past the TTL: the next Scan call (any) expires it and drops its snapshot.
        monkeypatch.setattr(service_mod, "SCANNER_IDLE_S", 0.2)
        time.sleep(0.5)
        other, rows = scan(ScanRequest(tablet_id="t1", batch_rows_max=100_000))
        assert not other.has_more and rows == 3000
        with pytest.raises(errors.NotFound, match="expired"):
            scan(ScanRequest(scanner_id=first.scanner_id))
        gc.collect()
        assert mapped_deleted(old) == []
    finally:
        m.close()


def test_an_abandoned_scanner_expires_without_another_scan(tmp_path, monkeypatch):
    """No Scan call follows: the service's reaper still expires the idle scanner (it used to
    be expired only by a later Scan call, so on a server that got no more scans its snapshot
    held the blocks a compaction had unlinked), and the reaper ends when none is left."""
    monkeypatch.setattr(service_mod, "SCANNER_IDLE_S", 0.4)
    m = open_manager(tmp_path / "root")
    try:
        t = create(m, "t1", SIX)
        assert t.wait_leader_ready(deadline(30))
        service = TServerService(m, lambda: "127.0.0.1:1")
        payload = memoryview(ipc(six_rows(range(1000))))
        req = WriteRequest(tablet_id="t1", schema_version=1, ops=[OpType.INSERT])
        service.write(req, CallContext("TServer.Write", "", time.monotonic() + 30, [payload]))
        assert t.flush()
        ctx = CallContext("TServer.Scan", "", time.monotonic() + 30, [])
        first = service.scan(ScanRequest(tablet_id="t1", batch_rows_max=10), ctx).body
        assert first.has_more and first.scanner_id
        wait_for(lambda: not service._scanners, 30, "the abandoned scanner expired")
        wait_for(lambda: service._reaper is None, 30, "the reaper ended")
        with pytest.raises(errors.NotFound, match="expired"):
            service.scan(ScanRequest(scanner_id=first.scanner_id), ctx)
    finally:
        m.close()
