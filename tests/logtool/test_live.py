"""The tool live against a running `logstore serve` process: only live entries are served,
invalidated ids show as gone (with who invalidated them when a live record says so);
--follow as a process stops cleanly on Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import pytest

from logstore.remote import RemoteLogStore
from tests.logstore.helpers import free_addresses

from .builder import B_ADDR, B_UUID, Writer, lease
from .conftest import items, run_tool

pytestmark = pytest.mark.integration


def json_lines(text: str) -> list[dict]:
    """The records (or epochs, or pending operations) of a --json run's one document."""
    return items(text)


def test_live_listing(served):
    exp = served.expected
    code, text = run_tool("--address", served.address, "--json")
    assert code == 0
    recs = json_lines(text)
    held = {r["id"]: r for r in recs if r["type"] != "gone"}
    assert set(held) == exp.live
    for i, r in held.items():
        assert r["status"] == "live" and r["type"] == exp.types[i] and r["source"] == "remote"
    gone = {
        i: g["invalidated_by"]
        for g in recs
        if g["type"] == "gone"
        for i in range(g["id"], g["id_to"] + 1)
    }
    assert set(gone) == set(range(1, exp.last_id + 1)) - exp.live
    for i, by in gone.items():
        # Known exactly when the invalidating record is itself still live.
        if exp.invalidated.get(i) in exp.live:
            assert by == exp.invalidated[i]
        else:
            assert by in (0, None)


def test_live_summary_pending_leases(served):
    exp = served.expected
    code, text = run_tool("--address", served.address, "--summary", "--json")
    (s,) = json_lines(text)
    assert code == 0 and s["last_id"] == exp.last_id
    assert s["live"] == len(exp.live) and s["invalidated_held"] == 0
    assert s["invalidated"] == s["gone_ids"] == exp.last_id - len(exp.live)
    code, text = run_tool("--address", served.address, "--pending", "--json")
    assert [r["id"] for r in json_lines(text)] == [exp.ids["events_started"]]
    code, text = run_tool("--address", served.address, "--leases", "--json")
    epochs = json_lines(text)
    assert [e["epoch"] for e in epochs] == [exp.ids["takeover_a"], exp.ids["takeover_b"]]
    code, text = run_tool("--address", served.address, "--type", "create_table", "--live-only")
    assert code == 0 and len(text.splitlines()) == 2  # orders DONE, events STARTED


def test_unreachable_address(capsys):
    (addr,) = free_addresses(1)
    code, _ = run_tool("--address", addr, "--timeout-s", "0.5")
    assert code == 1 and "coordinator log:" in capsys.readouterr().err


def _read_until(proc: subprocess.Popen, pred, timeout_s: float = 30.0) -> list[str]:
    """Lines from proc.stdout until pred(lines) holds (deadline-bounded)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + timeout_s
    try:
        while not pred(lines):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out; got {lines}"
            if sel.select(min(remaining, 0.5)):
                chunk = os.read(proc.stdout.fileno(), 65536)
                assert chunk, f"process ended; got {lines}"
                buf += chunk
                *done, buf = buf.split(b"\n")
                lines += [d.decode() for d in done if d.strip()]
    finally:
        sel.close()
    return lines


def test_follow_live_process_stops_on_ctrl_c(served):
    exp = served.expected
    env = dict(os.environ, PYTHONPATH=os.getcwd(), PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    # As from a terminal, where Ctrl-C reaches the tool: a test run started in the background
    # of a non-interactive shell (CI, `sh -c '... &'`) has SIGINT ignored, and a child
    # inherits that, so the tool is started with Python's own SIGINT handler in place.
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 'optools.logtool'; "
        "runpy.run_module('optools.logtool', run_name='__main__', alter_sys=True)"
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            start,
            "--address",
            served.address,
            "--follow",
            "--renewals",  # the renewals written below are what it waits for
            "--json",
            "--interval-s",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        first = _read_until(
            proc,
            lambda ls: any(
                json.loads(x).get("id_to", json.loads(x)["id"]) == exp.last_id for x in ls
            ),
        )
        with RemoteLogStore([served.address]) as store:
            w = Writer(store, exp)
            # A renewal that invalidates the previous one, then another: the first of the two
            # may be invalidated before the tool polls, then it shows as gone.
            r1 = w.record(
                "follow_r1",
                lease(B_UUID, B_ADDR, exp.ids["takeover_b"], False),
                (exp.ids["renew_b1"],),
            )
            w.record("follow_r2", lease(B_UUID, B_ADDR, exp.ids["takeover_b"], False), (r1,))
        target = exp.ids["follow_r2"]
        more = _read_until(proc, lambda ls: any(json.loads(x)["id"] == target for x in ls))
        new = [json.loads(x) for x in more]
        covered = set()
        for r in new:
            covered.update(range(r["id"], r.get("id_to", r["id"]) + 1))
        assert covered == {r1, target}
        assert all(json.loads(x)["id"] <= exp.last_id for x in first)
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            # Still running: have faulthandler print where every thread is, and fail with it.
            proc.send_signal(signal.SIGABRT)
            proc.wait(10)
            pytest.fail("no exit within 30 s of SIGINT:\n" + proc.stderr.read().decode())
        err = proc.stderr.read().decode()
        # As every command (design/client.md): one line, exit status 130.
        assert code == 130, err
        assert "Traceback" not in err, err
        assert err.strip().splitlines()[-1].endswith("interrupted"), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
