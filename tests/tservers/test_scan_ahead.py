"""The tablet server makes a scanner's next answer while the last one travels
(tservers/service.py, TServer.Scan; design/storage.md): the continuation gets the
answer made ahead, the rows come once and in key order, at most one answer is made ahead per
scanner and SCAN_AHEAD_MAX at once, a close or an expiry gives its place back, and an error
met while making it is raised to the continuation that takes it."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from rpc.errors import NotFound
from rpc.protocols.tserver_pb2 import OpType, ScanRequest, WriteRequest
from rpc.server import CallContext
from tests.support.procs import wait_for
from tests.tservers.helpers import SIX, create, deadline, ipc, open_manager, six_rows
from tservers import service as service_mod
from tservers.service import TServerService

ROWS = 3000


@pytest.fixture
def service(tmp_path):
    m = open_manager(tmp_path / "root")
    try:
        t = create(m, "t1", SIX)
        assert t.wait_leader_ready(deadline(30))
        svc = TServerService(m, lambda: "127.0.0.1:1")
        for start in range(0, ROWS, 1000):
            payload = memoryview(ipc(six_rows(range(start, start + 1000))))
            req = WriteRequest(tablet_id="t1", schema_version=1, ops=[OpType.INSERT])
            svc.write(req, CallContext("TServer.Write", "", time.monotonic() + 30, [payload]))
            assert t.flush()
        yield svc
    finally:
        m.close()


def call(svc: TServerService, req: ScanRequest):
    reply = svc.scan(req, CallContext("TServer.Scan", "", time.monotonic() + 30, []))
    ids = []
    for s in reply.sidecars:
        ids.extend(pa.ipc.open_stream(pa.py_buffer(bytes(s))).read_all().column("id").to_pylist())
    return reply.body, ids


def made_ahead(svc: TServerService, scanner_id: str) -> bool:
    with svc._scanners_lock:
        sc = svc._scanners.get(scanner_id)
    return sc is not None and sc.ahead is not None and sc.ahead.done.is_set()


def test_continuations_take_the_answer_made_ahead_every_row_once_in_order(service, monkeypatch):
    monkeypatch.setattr(service_mod, "SCAN_RESPONSE_BATCHES_MAX", 5)  # 50 rows an answer
    first, ids = call(service, ScanRequest(tablet_id="t1", batch_rows_max=10))
    assert first.has_more and len(ids) == 50
    answers = 1
    resp = first
    while resp.has_more:
        # Made while no call asks for it; one scanner, so one answer ahead.
        sid = resp.scanner_id
        wait_for(lambda sid=sid: made_ahead(service, sid), 30, "the next answer made")
        assert service._ahead == 1
        resp, more = call(service, ScanRequest(scanner_id=resp.scanner_id))
        ids.extend(more)
        answers += 1
    assert ids == list(range(ROWS))
    assert answers == ROWS // 50
    assert service._ahead == 0 and not service._scanners


def test_at_most_scan_ahead_max_scanners_make_an_answer_ahead(service, monkeypatch):
    monkeypatch.setattr(service_mod, "SCAN_AHEAD_MAX", 2)
    monkeypatch.setattr(service_mod, "SCAN_RESPONSE_BATCHES_MAX", 5)
    sids = [
        call(service, ScanRequest(tablet_id="t1", batch_rows_max=10))[0].scanner_id
        for _ in range(3)
    ]
    assert service._ahead == 2
    assert [service._scanners[s].ahead is not None for s in sids] == [True, True, False]
    # The third goes on without an answer made ahead; still in order.
    resp, ids = call(service, ScanRequest(scanner_id=sids[2]))
    assert ids == list(range(50, 100))
    # A close gives its place back; the next answer of the third is then made ahead.
    call(service, ScanRequest(scanner_id=sids[0], close=True))
    assert service._ahead == 1
    resp, ids = call(service, ScanRequest(scanner_id=sids[2]))
    assert ids == list(range(100, 150)) and service._ahead == 2
    # So does an expiry.
    monkeypatch.setattr(service_mod, "SCANNER_IDLE_S", 0.0)
    time.sleep(0.01)
    service._expire(time.monotonic())
    assert service._ahead == 0 and not service._scanners
    with pytest.raises(NotFound):
        call(service, ScanRequest(scanner_id=sids[1]))


def test_an_error_made_ahead_reaches_the_continuation(service, monkeypatch):
    monkeypatch.setattr(service_mod, "SCAN_RESPONSE_BATCHES_MAX", 5)
    tablet = service.manager.tablet("t1")
    real = tablet.scan_pieces

    def failing_pieces(*args, **kw):
        schema, pieces = real(*args, **kw)

        def gen():
            yield next(pieces).slice(0, 200)  # four answers' rows, then an error
            raise OSError("injected: a block could not be read")

        return schema, gen()

    monkeypatch.setattr(tablet, "scan_pieces", failing_pieces)
    first, ids = call(service, ScanRequest(tablet_id="t1", batch_rows_max=10))
    assert first.has_more and ids == list(range(50))
    resp = first
    # The answers before the one whose making failed (it met the error after its rows).
    with pytest.raises(OSError, match="injected"):
        while True:
            resp, more = call(service, ScanRequest(scanner_id=resp.scanner_id))
            ids.extend(more)
    assert ids == list(range(150))
    assert service._ahead == 0 and not service._scanners
