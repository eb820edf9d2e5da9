"""Refusals at the CURVE handshake: INFO while a key may be waiting to be admitted, a WARNING
only for a key still refused after the admission window (rpc/handshakes.py, issue 24).

At a secure `local-cluster up` every coordinator logged a WARNING per refused handshake of
each tablet server not admitted yet (~7 each, every start). The rule is tested pure, then
on a real CURVE rpc server in this process with real client connections.
"""

from __future__ import annotations

import logging
import time

import pytest

from rpc import errors, handshakes
from rpc.client import RpcClient
from rpc.handshakes import HandshakeRefusals, Verdict
from rpc.keys import ClientCurve, KeyPair, ServerCurve
from rpc.server import RpcServer

WAIT_S = 10.0
REFUSALS_MIN = 4  # handshakes refused in each real-server test


def test_the_rule_first_counted_then_one_warning_per_window() -> None:
    rule = HandshakeRefusals(window_s=30.0)
    assert rule.refused("k", 100.0).verdict is Verdict.FIRST
    assert rule.refused("k", 100.5).verdict is Verdict.COUNTED
    assert rule.refused("k", 129.9).verdict is Verdict.COUNTED
    late = rule.refused("k", 130.0)
    assert (late.verdict, late.refusals, late.since_s) == (Verdict.STILL_REFUSED, 4, 30.0)
    assert rule.refused("k", 140.0).verdict is Verdict.COUNTED  # warned in this window
    assert rule.refused("k", 160.0).verdict is Verdict.STILL_REFUSED
    # Another key has its own window.
    assert rule.refused("j", 160.0).verdict is Verdict.FIRST
    # Admitted: its refusals before are told once, and it is forgotten.
    admitted = rule.admitted("k", 161.0)
    assert admitted is not None and (admitted.refusals, admitted.since_s) == (6, 61.0)
    assert rule.admitted("k", 162.0) is None
    assert rule.admitted("never-refused", 162.0) is None
    assert rule.refused("k", 170.0).verdict is Verdict.FIRST  # a new window


def test_the_rule_remembers_a_bounded_number_of_keys() -> None:
    rule = HandshakeRefusals(window_s=30.0, keys_max=3)
    for i in range(10):
        rule.refused(f"k{i}", float(i))
    assert len(rule) == 3
    assert rule.refused("k9", 10.0).verdict is Verdict.COUNTED  # kept: the newest
    assert rule.refused("k0", 11.0).verdict is Verdict.FIRST  # forgotten: a new window


def _refuse_until(server: RpcServer, caller: KeyPair, server_key: KeyPair, refused: list):
    """Connect as `caller` (a new connection, so a new handshake, each time) until the
    server has refused REFUSALS_MIN handshakes of it."""
    deadline = time.monotonic() + WAIT_S
    while len(refused) < REFUSALS_MIN:
        assert time.monotonic() < deadline, f"{len(refused)} refusals in {WAIT_S:.0f}s"
        with RpcClient(
            server.address, "caller", curve=ClientCurve(caller), server_key=server_key.public
        ) as rc:
            with pytest.raises(errors.RpcError):
                rc.ping(timeout_s=0.5)


def _server(admitted: set[str], refused: list[str], server_key: KeyPair) -> RpcServer:
    def authorize(key: str) -> str | None:
        if key in admitted:
            return "peer"
        refused.append(key)
        return None

    return RpcServer("node-a", service="test", curve=ServerCurve(server_key, authorize))


def _records(caplog, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


def test_a_key_refused_then_admitted_within_the_window_logs_no_warning(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="rpc")
    caller, server_key = KeyPair.generate(), KeyPair.generate()
    admitted: set[str] = set()
    refused: list[str] = []
    with _server(admitted, refused, server_key) as server:
        _refuse_until(server, caller, server_key, refused)
        admitted.add(caller.public)  # as the principal is logged and replayed
        with RpcClient(
            server.address, "caller", curve=ClientCurve(caller), server_key=server_key.public
        ) as rc:
            assert rc.ping(timeout_s=WAIT_S).uuid == "node-a"
    handshake = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "handshake" in r.getMessage()
    ]
    assert handshake == []
    first = _records(caplog, logging.INFO, f"unknown key {caller.public}")
    assert len(first) == 1, first
    told = _records(caplog, logging.INFO, f"admitted key {caller.public}")
    assert len(told) == 1 and f"after {len(refused)} refusals" in told[0], told


def test_a_key_still_refused_after_the_window_is_one_warning(caplog, monkeypatch) -> None:
    monkeypatch.setattr(handshakes, "ADMISSION_WINDOW_S", 0.3)
    caplog.set_level(logging.DEBUG, logger="rpc")
    caller, server_key = KeyPair.generate(), KeyPair.generate()
    refused: list[str] = []
    with _server(set(), refused, server_key) as server:
        _refuse_until(server, caller, server_key, refused)
        deadline = time.monotonic() + WAIT_S
        while not _records(caplog, logging.WARNING, f"unknown key {caller.public}"):
            assert time.monotonic() < deadline, "no WARNING for a key refused past its window"
            _refuse_until(server, caller, server_key, refused)
            refused.clear()
    warned = _records(caplog, logging.WARNING, f"unknown key {caller.public}")
    assert len(warned) == 1 and "not admitted" in warned[0], warned
    assert len(_records(caplog, logging.INFO, f"unknown key {caller.public}")) == 1
