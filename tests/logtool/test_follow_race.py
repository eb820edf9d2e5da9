"""A live read that races the leader's next renewal. The tool asks the log's last id, then
reads the live entries up to it; a renewal appended between the two invalidates the one at
the last id, so that one is no longer served. The renewal that invalidated it is served in
the same read (past the last id asked): without it the id shows as `gone` with no
invalidator, which `--follow` cannot tell from anything else and prints, though it hides
lease renewals and their gone ranges. The race is made to happen every time: the renewal is
appended to a real `logstore serve` process right after the tool's LastId call returns."""

from __future__ import annotations

import io
import threading

import pytest

from logstore.remote import RemoteLogStore
from optools import logtool
from optools.logtool_source import RemoteReader
from tests.logstore.procs import make_replicas

from .builder import A_ADDR, A_UUID, Expected, Writer, lease

pytestmark = pytest.mark.integration


@pytest.fixture
def served(tmp_path):
    """A fresh `logstore serve` replica holding epoch 1's takeover and one renewal."""
    (replica,) = make_replicas(tmp_path, 1)
    replica.start()
    try:
        with RemoteLogStore([replica.rpc_address]) as store:
            store.barrier(timeout_s=20.0)
            w = Writer(store, Expected())
            w.record("takeover", lease(A_UUID, A_ADDR, 1, True))
            w.record("renew_1", lease(A_UUID, A_ADDR, 1, False))
        yield replica.rpc_address, w.exp
    finally:
        replica.stop()


def _follow_racing(monkeypatch, address: str, exp: Expected, race_on_call: int, *flags: str):
    """Run `--follow` in-process against `address`; its LastId call number `race_on_call`
    (1: the first listing's, 2: the first poll's) returns the last id, then a renewal is
    appended that invalidates the renewal at that id. The poll after that stops the follow.
    Returns stdout's lines and the id of that renewal."""
    stop = threading.Event()
    calls = 0
    real_last_id = RemoteReader.last_id
    store = RemoteLogStore([address])
    w = Writer(store, exp)
    racer: dict[str, int] = {}

    def last_id(self, log: str) -> int:
        nonlocal calls
        calls += 1
        if calls == 2 and race_on_call == 2:  # something new for the first poll to read
            w.record("renew_2", lease(A_UUID, A_ADDR, 1, False), (exp.ids["renew_1"],))
        last = real_last_id(self, log)
        if calls == race_on_call:
            racer["id"] = w.record("racer", lease(A_UUID, A_ADDR, 1, False), (last,))
        if calls == race_on_call + 1:
            stop.set()  # this poll reads the racer, then the follow ends
        return last

    monkeypatch.setattr(RemoteReader, "last_id", last_id)
    out = io.StringIO()
    args = logtool.build_parser().parse_args(
        ["--address", address, "--follow", "--interval-s", "0.05", *flags]
    )
    try:
        code = logtool.run(args, out=out, stop=stop)
    finally:
        store.close()
    assert code == 0, out.getvalue()
    assert calls == race_on_call + 1, calls
    return out.getvalue().splitlines(), racer["id"]


@pytest.mark.parametrize("race_on_call", [1, 2], ids=["first-listing", "poll"])
def test_a_renewal_appended_between_last_id_and_read_hides_like_any(
    monkeypatch, served, race_on_call
):
    address, exp = served
    lines, racer = _follow_racing(monkeypatch, address, exp, race_on_call)
    # Epoch 1 shows once (its takeover); the renewals, and the ids they invalidated, do not.
    assert [ln for ln in lines if not ln.startswith("(")] == [
        ln for ln in lines if ln.startswith(f"#{exp.ids['takeover']} live lease takeover")
    ], lines
    assert not [ln for ln in lines if " gone " in ln], lines
    assert any("lease renewal" in ln and "hidden" in ln for ln in lines), lines
    # Once the racer was appended, it was in the read (it invalidated the last id asked for).
    assert racer == exp.last_id


def test_with_renewals_the_raced_id_shows_who_invalidated_it(monkeypatch, served):
    address, exp = served
    lines, racer = _follow_racing(monkeypatch, address, exp, 2, "--renewals")
    raced = racer - 1  # the renewal at the last id the poll asked for
    assert f"#{raced} gone (invalidated by #{racer}; no longer held)" in lines, lines
    assert any(ln.startswith(f"#{racer} live lease renewal epoch=1") for ln in lines), lines
