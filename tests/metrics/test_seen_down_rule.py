"""When a coordinator node logs a tablet server "seen down" (coordinator/metrics.py).

At a secure cluster's start a tablet server is admitted, then enlisted, some seconds after
the coordinators started; a node that replays its enlistment before its first heartbeat
arrived there logged "seen down ... (never heard from by this node)" at once, and "is back"
half a second later (issue 24: WARNINGs an on-call engineer must be able to trust). A server
never heard from is silent since the node first knew of it, so it has one tablet-server
timeout to heartbeat; one that stays silent for that long is still seen down, and back.

The watcher's step runs against a real catalog; the node around it is a stand-in (the
observer reads only its catalog, its engine's timeout and its config).
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import pytest

from coordinator.catalog import Catalog, ServerInfo, ServerState
from coordinator.metrics import CoordinatorObserver, server_silence_s

WAIT_S = 10.0  # bound on the waits for a silence to be seen


def _observer(timeout_s: float) -> tuple[CoordinatorObserver, Catalog]:
    catalog = Catalog()
    node = SimpleNamespace(
        catalog=catalog,
        engine=SimpleNamespace(config=SimpleNamespace(tserver_timeout_s=timeout_s)),
        config=SimpleNamespace(node_id="node-0", raft_address=""),
        server=SimpleNamespace(collect_metrics=lambda: []),
    )
    return CoordinatorObserver(node), catalog


def _enlist(catalog: Catalog, uuid: str, address: str) -> None:
    with catalog.lock:
        catalog.servers[uuid] = ServerInfo(uuid, address, ServerState.LIVE, record_id=1)


def _heartbeat(catalog: Catalog, uuid: str) -> None:
    with catalog.lock:
        catalog.heartbeats[uuid] = time.monotonic()


def _lines(caplog, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if what in r.getMessage()]


def test_a_server_enlisted_late_is_not_seen_down_before_its_first_heartbeat(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.metrics")
    observer, catalog = _observer(timeout_s=5.0)
    # The node has been up for a minute (far past one timeout) when it replays the
    # enlistment of a server admitted just now, before that server's first heartbeat here.
    observer._started_at = time.monotonic() - 60.0
    _enlist(catalog, "ts-late", "127.0.0.1:7050")
    observer._watch_servers()
    _heartbeat(catalog, "ts-late")  # its heartbeat, half a second later
    observer._watch_servers()
    assert not _lines(caplog, "seen down"), _lines(caplog, "seen down")
    assert not _lines(caplog, "is back"), _lines(caplog, "is back")


def test_a_server_never_heard_from_for_a_timeout_is_seen_down_then_back(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="coordinator.metrics")
    timeout_s = 0.2
    observer, catalog = _observer(timeout_s)
    _enlist(catalog, "ts-silent", "127.0.0.1:7051")
    _enlist(catalog, "ts-dies", "127.0.0.1:7052")
    _heartbeat(catalog, "ts-dies")
    deadline = time.monotonic() + WAIT_S
    while len(_lines(caplog, "seen down")) < 2 and time.monotonic() < deadline:
        observer._watch_servers()
        time.sleep(timeout_s / 10)
    down = _lines(caplog, "seen down")
    assert len(down) == 2, down
    silent = [line for line in down if "ts-silent" in line]
    assert silent and "never heard from by this node" in silent[0], down
    dies = [line for line in down if "ts-dies" in line]
    assert dies and "never heard from" not in dies[0], down
    _heartbeat(catalog, "ts-silent")
    observer._watch_servers()
    back = _lines(caplog, "is back")
    assert len(back) == 1 and "ts-silent" in back[0], back


def test_silence_counts_from_the_last_heartbeat_else_from_first_knowledge() -> None:
    assert server_silence_s(now=10.0, last_heartbeat=7.5, known_since=1.0) == 2.5
    assert server_silence_s(now=10.0, last_heartbeat=None, known_since=9.0) == 1.0
    with pytest.raises(AssertionError):
        server_silence_s(now=1.0, last_heartbeat=None, known_since=2.0)
