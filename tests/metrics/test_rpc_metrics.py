"""RpcServer metrics over real zmq sockets: names and labels of every family, calls counted
by method and status exactly, latency histograms, THROTTLED, refusals, metrics off."""

from __future__ import annotations

import threading

import pytest
import zmq
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rpc import errors, observe
from rpc.client import RpcClient
from rpc.rpc_pb2 import PingResponse
from rpc.server import CallContext, RpcServer
from tests.metrics.support import value
from tests.support.procs import wait_for

UUID = "metrics-test-server"
RPC_FAMILIES = {
    "logcentric_rpc_calls": "counter",
    "logcentric_rpc_call_latency_seconds": "histogram",
    "logcentric_rpc_requests": "counter",
    "logcentric_rpc_rejected": "counter",
    "logcentric_rpc_throttled": "counter",
    "logcentric_rpc_inflight_calls": "gauge",
    "logcentric_rpc_queue_depth_calls": "gauge",
    "logcentric_rpc_workers": "gauge",
}


def scrape_server(server: RpcServer) -> dict:
    registry = observe.new_registry()
    registry.register(observe.ScrapeCollector(server.collect_metrics))
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def make_server(**kw) -> RpcServer:
    srv = RpcServer(UUID, "127.0.0.1:0", service="test", **kw)
    srv.register("Test.Echo", PingResponse, lambda req, ctx: req)
    srv.register("Test.Inline", PingResponse, lambda req, ctx: req, inline=True)

    def fail(req: PingResponse, ctx: CallContext):
        raise errors.NotFound(f"no {req.uuid}")

    srv.register("Test.Fail", PingResponse, fail)
    return srv


def test_families_names_types_and_labels():
    with make_server(workers=2, queue_max=8) as srv, RpcClient(srv.address, "c") as c:
        c.call(UUID, "Test.Echo", PingResponse(uuid="a"), PingResponse, timeout_s=30)
        fams = scrape_server(srv)
    for name, kind in RPC_FAMILIES.items():
        assert name in fams, name
        assert fams[name].type == kind, (name, fams[name].type)
        assert name.startswith("logcentric_rpc_")
    calls = [s for s in fams["logcentric_rpc_calls"].samples if s.name.endswith("_total")]
    assert calls and all(set(s.labels) == {"service", "method", "status"} for s in calls)
    hist = fams["logcentric_rpc_call_latency_seconds"].samples
    assert {k for s in hist for k in s.labels} == {"service", "method", "le"}
    assert {s.labels["service"] for s in calls} == {"test"}
    assert {s.labels["reason"] for s in fams["logcentric_rpc_rejected"].samples} == {
        "bad_request",
        "invalid_name",
        "unauthenticated",
    }


def test_calls_counted_by_method_and_status_with_latency():
    with make_server(workers=4, queue_max=64) as srv, RpcClient(srv.address, "c") as c:
        before = scrape_server(srv)
        assert value(before, "logcentric_rpc_calls", method="Test.Echo") == 0
        for i in range(40):
            c.call(UUID, "Test.Echo", PingResponse(uuid=str(i)), PingResponse, timeout_s=30)
        for i in range(25):
            c.call(UUID, "Test.Inline", PingResponse(uuid=str(i)), PingResponse, timeout_s=30)
        for i in range(7):
            with pytest.raises(errors.NotFound):
                c.call(UUID, "Test.Fail", PingResponse(uuid=str(i)), PingResponse, timeout_s=30)
        c.ping(timeout_s=30)
        fams = scrape_server(srv)
    v = lambda **kw: value(fams, "logcentric_rpc_calls", **kw)  # noqa: E731
    assert v(method="Test.Echo", status="OK") == 40
    assert v(method="Test.Inline", status="OK") == 25
    assert v(method="Test.Fail", status="NOT_FOUND") == 7
    assert v(method="Test.Fail", status="OK") == 0
    assert v(method="rpc.Ping", status="OK") == 1
    count = "logcentric_rpc_call_latency_seconds_count"
    lat = lambda m: value(fams, "logcentric_rpc_call_latency_seconds", count, method=m)  # noqa: E731
    assert lat("Test.Echo") == 40 and lat("Test.Inline") == 25 and lat("Test.Fail") == 7
    inf = value(
        fams, "logcentric_rpc_call_latency_seconds", "logcentric_rpc_call_latency_seconds_bucket",
        method="Test.Echo", le="+Inf",
    )  # fmt: skip
    assert inf == 40
    total_s = value(
        fams, "logcentric_rpc_call_latency_seconds", "logcentric_rpc_call_latency_seconds_sum",
        method="Test.Echo",
    )  # fmt: skip
    assert total_s > 0
    assert value(fams, "logcentric_rpc_requests") == 73
    assert value(fams, "logcentric_rpc_workers") == 4


def test_throttled_and_refusals_counted():
    release = threading.Event()
    srv = RpcServer(UUID, "127.0.0.1:0", service="test", workers=1, queue_max=1)
    srv.register("Test.Block", PingResponse, lambda req, ctx: (release.wait(60), req)[1])
    with srv, RpcClient(srv.address, "c") as c:
        futures = [
            c.call_async(UUID, "Test.Block", PingResponse(uuid=str(i)), PingResponse, timeout_s=60)
            for i in range(5)
        ]
        throttled = 0
        try:
            for f in futures[2:]:
                with pytest.raises(errors.Throttled):
                    f.result()
                throttled += 1
            # Admitted calls reach the worker thread asynchronously: wait (bounded) until the
            # one worker has taken the first call, then one runs and one waits.
            fams = wait_for(
                lambda: (
                    (f := scrape_server(srv))
                    and value(f, "logcentric_rpc_queue_depth_calls") == 1
                    and f
                ),
                timeout_s=30,
                what="the worker takes the first call",
            )
            assert value(fams, "logcentric_rpc_inflight_calls") == 2
        finally:
            release.set()
        for f in futures[:2]:
            f.result()
        with pytest.raises(errors.InvalidName):
            c.call("someone-else", "Test.Block", PingResponse(), PingResponse, timeout_s=30)
        with pytest.raises(errors.BadRequest):
            c.call(UUID, "Test.Nothing", PingResponse(), PingResponse, timeout_s=30)
        fams = scrape_server(srv)
    assert throttled == 3
    assert value(fams, "logcentric_rpc_throttled") == 3
    assert value(fams, "logcentric_rpc_calls", method="Test.Block", status="THROTTLED") == 3
    assert value(fams, "logcentric_rpc_calls", method="Test.Block", status="OK") == 2
    assert value(fams, "logcentric_rpc_rejected", reason="invalid_name") == 1
    assert value(fams, "logcentric_rpc_rejected", reason="bad_request") == 1
    assert value(fams, "logcentric_rpc_inflight_calls") == 0


def test_malformed_frames_counted_as_bad_requests():
    with make_server(workers=1, queue_max=4) as srv:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(f"tcp://{srv.address}")
        try:
            sock.send_multipart([b"\xff\xff not a header", b""])
            assert sock.poll(30_000), "no answer to a malformed header"
            sock.recv_multipart()
        finally:
            sock.close()
            ctx.term()
        fams = scrape_server(srv)
    assert value(fams, "logcentric_rpc_rejected", reason="bad_request") == 1
    assert value(fams, "logcentric_rpc_requests") == 1


def test_metrics_off_keeps_no_per_method_figures():
    with make_server(workers=2, queue_max=8, metrics=False) as srv:
        with RpcClient(srv.address, "c") as c:
            c.call(UUID, "Test.Echo", PingResponse(uuid="a"), PingResponse, timeout_s=30)
        fams = scrape_server(srv)
        assert srv.method_stats() == {}
    assert value(fams, "logcentric_rpc_calls") == 0
    assert value(fams, "logcentric_rpc_requests") == 1  # server-wide counters stay
