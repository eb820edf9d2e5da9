"""free_port's range: SERVER_PORTS, or $LOGCENTRIC_PORT_RANGE (each pytest-xdist worker gets
its own slice from tests/conftest.py, so two workers never pick the same port)."""

from __future__ import annotations

import pytest

from rpc.addresses import PORT_RANGE_ENV, SERVER_PORTS, free_port, server_ports
from rpc.errors import BadRequest


def test_free_ports_come_from_the_range_given(monkeypatch):
    monkeypatch.setenv(PORT_RANGE_ENV, "23000-23009")
    assert server_ports() == range(23000, 23010)
    assert all(23000 <= free_port() <= 23009 for _ in range(20))
    monkeypatch.delenv(PORT_RANGE_ENV)
    assert server_ports() == SERVER_PORTS


@pytest.mark.parametrize("bad", ["23000", "a-b", "30000-20000", "80-90", "60000-70000"])
def test_a_bad_range_is_refused_with_its_name(monkeypatch, bad):
    monkeypatch.setenv(PORT_RANGE_ENV, bad)
    with pytest.raises(BadRequest, match=PORT_RANGE_ENV):
        free_port()


def test_xdist_workers_get_disjoint_slices():
    """Under ./dev test each worker's slice is its own part of SERVER_PORTS."""
    import os

    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        pytest.skip("not under pytest-xdist")
    count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    ports = server_ports()
    size = len(SERVER_PORTS) // count
    assert len(ports) == size and ports.start == SERVER_PORTS.start + int(worker[2:]) * size


def test_no_port_is_handed_out_twice_before_the_range_is_used_up(monkeypatch):
    """A local cluster asks for all its ports before its daemons bind any: free_port must not
    give one port twice in that window (a random pick with only a bind test did, and a tablet
    server died of "Address already in use")."""
    monkeypatch.setenv(PORT_RANGE_ENV, "23100-23149")
    first = [free_port() for _ in range(50)]
    assert sorted(first) == list(range(23100, 23150))
    again = [free_port() for _ in range(10)]  # the range used up: it starts over
    assert len(set(again)) == 10 and all(23100 <= p <= 23149 for p in again)


def test_a_bound_port_is_skipped(monkeypatch):
    import socket

    monkeypatch.setenv(PORT_RANGE_ENV, "23200-23203")
    with socket.socket() as held:
        held.bind(("127.0.0.1", 23201))
        held.listen()
        got = {free_port() for _ in range(3)}
    assert got == {23200, 23202, 23203}
