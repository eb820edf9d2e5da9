"""The client's scan fetches one answer ahead (logcentric/tablets.py, TabletServerClient.scan;
design/security.md section 7), against a real tablet server process: a scan of many answers
returns every row once, in order, with the next answer asked for before the current one's
batches are handed out and never more than one call ahead; a generator closed after its
first batch leaves no scanner open on the server; an error of a continuation reaches the
caller after the batches of the answer before it."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from logcentric.tablets import TabletServerClient, column
from rpc.client import RpcClient
from rpc.errors import NotFound, RpcError
from rpc.protocols.tserver_pb2 import ScanRequest, ScanResponse
from tests.tservers.procs import TServerProcess
from tservers.fs import FsLayout

pytestmark = pytest.mark.integration

COLS = [column("id", "int64", key=True), column("v", "int32", nullable=True)]
ROWS = 5000
BATCH_ROWS = 10  # 64 batches an answer (SCAN_RESPONSE_BATCHES_MAX): 640 rows an answer
ANSWER_ROWS = 640


class ScanSpy:
    """Records, on the client's rpc client, each Scan call as it starts and ends, and the
    most calls in flight at once."""

    def __init__(self, client: TabletServerClient) -> None:
        self.lock = threading.Lock()
        self.started = 0
        self.in_flight = 0
        self.in_flight_max = 0
        self.scanner_ids: list[str] = []
        rpc = client._rpc
        inner = rpc.call_with_sidecars

        def call_with_sidecars(recipient, method, request, response_type, **kw):
            if method != "TServer.Scan":
                return inner(recipient, method, request, response_type, **kw)
            with self.lock:
                self.started += 1
                self.in_flight += 1
                self.in_flight_max = max(self.in_flight_max, self.in_flight)
            try:
                resp, sidecars = inner(recipient, method, request, response_type, **kw)
                if resp.scanner_id:
                    with self.lock:
                        self.scanner_ids.append(resp.scanner_id)
                return resp, sidecars
            finally:
                with self.lock:
                    self.in_flight -= 1

        rpc.call_with_sidecars = call_with_sidecars


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "root"
    FsLayout.format(root)
    p = TServerProcess(root).start()
    try:
        with TabletServerClient(p.address) as c:
            c.create_tablet("t1", COLS, table_name="tbl")
            s = c.new_session(flush_rows_max=ROWS)
            ids = list(range(ROWS))
            s.insert(
                "t1", pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(ids, pa.int32())})
            )
            s.flush()
        yield p
    finally:
        p.stop()


def test_a_scan_of_many_answers_returns_every_row_once_in_order_one_answer_ahead(server):
    with TabletServerClient(server.address) as c:
        spy = ScanSpy(c)
        scan = c.scan("t1", batch_rows_max=BATCH_ROWS)
        first = next(scan)
        assert first.num_rows == BATCH_ROWS
        # The continuation was asked for before the first answer's batches were handed out.
        assert spy.started == 2
        ids = first.column("id").to_pylist()
        for b in scan:
            ids.extend(b.column("id").to_pylist())
        assert ids == list(range(ROWS))
        assert spy.started == -(-ROWS // ANSWER_ROWS)  # one call an answer, none more
        assert spy.in_flight_max == 1  # never two calls of the scan at once
        # Again: the continuations go through the same long-lived thread, so the same
        # connection (the rpc layer gives each calling thread its own; a thread a call would
        # be a new connection, and a new CURVE handshake, an answer).
        assert sum(b.num_rows for b in c.scan("t1", batch_rows_max=BATCH_ROWS)) == ROWS
        assert len(c._rpc._transport._direct) == 2  # this thread's and the prefetch thread's


def test_closing_the_generator_after_the_first_batch_leaves_no_scanner_open(server):
    with TabletServerClient(server.address) as c:
        spy = ScanSpy(c)
        scan = c.scan("t1", batch_rows_max=BATCH_ROWS)
        assert next(scan).num_rows == BATCH_ROWS
        scan.close()
        assert spy.in_flight == 0  # the prefetched continuation was waited for
        assert spy.scanner_ids  # the scan had more: the server held a scanner
        with RpcClient(server.address) as raw:
            for sid in set(spy.scanner_ids):
                with pytest.raises(NotFound, match="not found"):
                    raw.call(
                        server.uuid,
                        "TServer.Scan",
                        ScanRequest(scanner_id=sid),
                        ScanResponse,
                        timeout_s=10,
                    )


def test_an_error_of_a_continuation_reaches_the_caller_after_the_answer_before_it(server):
    with TabletServerClient(server.address, timeout_s=5.0) as c:
        scan = c.scan("t1", batch_rows_max=BATCH_ROWS)
        got = next(scan).column("id").to_pylist()
        server.kill9()  # every later continuation fails (no answer: TIMED_OUT, or UNAVAILABLE)
        with pytest.raises(RpcError):
            for b in scan:
                got.extend(b.column("id").to_pylist())
        # Whole answers came before the error, in order; not the whole scan.
        assert got == list(range(len(got)))
        assert len(got) % ANSWER_ROWS == 0 and ANSWER_ROWS <= len(got) < ROWS
