"""The daemon HTTP endpoint over a real socket: /metrics parsed by prometheus-client's own
parser, /healthz, /readyz, pages, the bound on concurrent requests; and the log set-up."""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request

import pytest
from prometheus_client.metrics_core import CounterMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from rpc import logsetup, observe


def get(url: str, timeout_s: float = 10.0) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return r.status, r.headers["Content-Type"], r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read()


def families(body: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def test_metrics_are_made_at_scrape_time_and_parse():
    registry = observe.new_registry()
    calls = {"n": 0}
    hist = observe.LatencyHistogram()

    def collect():
        c = CounterMetricFamily("logcentric_test_calls", "calls", labels=["method"])
        c.add_metric(["A.B"], calls["n"])
        yield c
        yield observe.histogram_family(
            "logcentric_test_latency_seconds", "latency", ["method"], [(["A.B"], hist)]
        )

    registry.register(observe.ScrapeCollector(collect))
    with observe.HttpEndpoint("127.0.0.1:0", registry, name="test") as http:
        status, ctype, body = get(http.url + "/metrics")
        assert status == 200 and ctype.startswith("text/plain")
        fams = families(body)
        assert fams["logcentric_test_calls"].samples[0].value == 0
        assert "process_resident_memory_bytes" in fams  # the process collector
        calls["n"] = 7
        for s in (0.0001, 0.002, 0.002, 3.0):
            hist.observe(s)
        fams = families(get(http.url + "/metrics")[2])
        assert fams["logcentric_test_calls"].samples[0].value == 7
        samples = {
            (s.name, s.labels.get("le")): s.value
            for s in fams["logcentric_test_latency_seconds"].samples
        }
        assert samples[("logcentric_test_latency_seconds_count", None)] == 4
        assert samples[("logcentric_test_latency_seconds_bucket", "0.0025")] == 3
        assert samples[("logcentric_test_latency_seconds_bucket", "+Inf")] == 4
        assert samples[("logcentric_test_latency_seconds_sum", None)] == pytest.approx(3.0041)


def test_health_readiness_and_pages():
    state = {"ready": False}

    def ready():
        return (state["ready"], [] if state["ready"] else ["no leader known"])

    def page(path, query):
        if path == "/hello":
            return observe.Page(200, f"<p>hi {query.get('who', ['?'])[0]}</p>".encode())
        if path == "/boom":
            raise RuntimeError("a page bug")
        return None

    with observe.HttpEndpoint(
        "127.0.0.1:0", observe.new_registry(), name="t", ready=ready, pages=[page]
    ) as http:
        status, _, body = get(http.url + "/healthz")
        assert status == 200 and json.loads(body)["ok"] is True
        status, ctype, body = get(http.url + "/readyz")
        assert status == 503 and ctype == "application/json"
        assert json.loads(body) == {"ready": False, "why": ["no leader known"]}
        state["ready"] = True
        assert get(http.url + "/readyz")[0] == 200
        assert get(http.url + "/hello?who=ops")[2] == b"<p>hi ops</p>"
        assert get(http.url + "/nothing")[0] == 404
        assert get(http.url + "/boom")[0] == 500
        assert get(http.url + "/healthz")[0] == 200  # still serving after a page's bug


def test_requests_beyond_the_bound_get_503_at_once():
    entered = threading.Semaphore(0)
    release = threading.Event()

    def slow(path, query):
        if path != "/slow":
            return None
        entered.release()
        release.wait(30)
        return observe.Page(200, b"done")

    with observe.HttpEndpoint(
        "127.0.0.1:0", observe.new_registry(), name="t", pages=[slow]
    ) as http:
        results: list[int] = []
        threads = [
            threading.Thread(target=lambda: results.append(get(http.url + "/slow", 60)[0]))
            for _ in range(observe.REQUESTS_MAX)
        ]
        for t in threads:
            t.start()
        for _ in range(observe.REQUESTS_MAX):
            assert entered.acquire(timeout=30)
        assert get(http.url + "/healthz")[0] == 503  # every slot is taken
        release.set()
        for t in threads:
            t.join(60)
        assert results == [200] * observe.REQUESTS_MAX
        assert get(http.url + "/healthz")[0] == 200


def test_json_logs_rotate(tmp_path):
    path = tmp_path / "logs" / "d.log"
    handler = logsetup.configure(level="INFO", fmt="json", file=path, max_bytes=4096, backups=2)
    try:
        log = logging.getLogger("test.component")
        for i in range(200):
            log.info("line %d of %s", i, "many", extra={"fields": {"tablet": "t1"}})
        try:
            raise ValueError("bad")
        except ValueError:
            log.exception("it failed")
        handler.flush()
        lines = path.read_text().splitlines()
        last = json.loads(lines[-1])
        assert last["msg"] == "it failed" and "ValueError: bad" in last["exc"]
        first = json.loads(lines[0])
        assert first["logger"] == "test.component" and first["tablet"] == "t1"
        assert first["ts"].endswith("Z")
        assert sorted(p.name for p in path.parent.iterdir()) == ["d.log", "d.log.1", "d.log.2"]
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
    with pytest.raises(ValueError, match="log format"):
        logsetup.configure(fmt="xml")


def test_the_collectors_pauses_are_counted_and_a_long_one_logged(monkeypatch, caplog):
    """Every daemon's /metrics says how long the cyclic garbage collector held the
    interpreter, per generation; one at least GC_PAUSE_LOG_S long is logged (at 10,000
    replicas a full collection takes ~1 s, the peers' liveness silence)."""
    import gc

    registry = observe.new_registry()
    with observe.HttpEndpoint("127.0.0.1:0", registry, name="test") as http:

        def full() -> tuple[float, float]:
            fams = families(get(http.url + "/metrics")[2])
            count = {s.labels["generation"]: s.value for s in fams["logcentric_gc_pauses"].samples}
            secs = {
                s.labels["generation"]: s.value for s in fams["logcentric_gc_pause_seconds"].samples
            }
            return count["2"], secs["2"]

        n0, s0 = full()
        monkeypatch.setattr(observe, "GC_PAUSE_LOG_S", 0.0)
        kept = [[i] for i in range(200_000)]  # something to walk
        with caplog.at_level(logging.WARNING, logger="rpc.observe"):
            gc.collect()
        n1, s1 = full()
        assert n1 >= n0 + 1 and s1 > s0  # (others may have run meanwhile)
        assert any("garbage collection of generation 2 held" in r.message for r in caplog.records)
        assert kept
