"""The catalog's replica counts per server (issue 28): kept as `tablets` and
`tablet_reports` change, so that CreateTable's placement does not recount every tablet (which
made creating 10,000 tables quadratic). Random changes through every way the code changes
those dicts; after each, the kept counts equal a recount from scratch."""

from __future__ import annotations

import random

import pytest

from coordinator.catalog import (
    Catalog,
    ServerInfo,
    ServerState,
    TabletInfo,
    TabletReportInfo,
)

SERVERS = [f"s{i}" for i in range(6)]


def _replicas(rng: random.Random) -> tuple[str, ...]:
    return tuple(rng.sample(SERVERS, rng.randint(0, 4)))


def _report(rng: random.Random) -> TabletReportInfo:
    uuids = _replicas(rng)
    return TabletReportInfo(uuids[0] if uuids else "", 1, rng.randint(0, 9), uuids, 0.0)


@pytest.mark.parametrize("seed", range(20))
def test_counts_follow_every_change(seed: int):
    rng = random.Random(seed)
    c = Catalog()
    for u in SERVERS[:5]:  # s5 holds replicas but is not a known server
        c.servers[u] = ServerInfo(u, "x", ServerState.LIVE, 1)
    ids = [f"t{i}" for i in range(12)]
    for _ in range(400):
        t = rng.choice(ids)
        op = rng.randrange(11)
        if op <= 2:
            c.tablets[t] = TabletInfo(t, "T", 0, 1, _replicas(rng))
        elif op <= 4:
            c.tablet_reports[t] = _report(rng)
        elif op == 5:
            c.tablets.pop(t, None)
        elif op == 6:
            c.tablet_reports.pop(t, None)
        elif op == 7 and t in c.tablet_reports:
            del c.tablet_reports[t]
        elif op == 8:
            c.tablets.setdefault(t, TabletInfo(t, "T", 0, 1, _replicas(rng)))
        elif op == 9:
            rebuilt = Catalog()
            for k in rng.sample(ids, 5):
                rebuilt.tablets[k] = TabletInfo(k, "T", 0, 1, _replicas(rng))
            c.adopt_logged(rebuilt)
        elif rng.random() < 0.2:
            c.tablet_reports.clear()
        assert c.replica_counts() == c.replica_counts_recounted()
    c.tablets.clear()
    assert sum(c.replica_counts().values()) == 0


def test_a_catalog_built_with_tablets_counts_them():
    t = TabletInfo("t", "T", 0, 1, ("a", "b"))
    c = Catalog(tablets={"t": t}, servers={"a": ServerInfo("a", "x", ServerState.LIVE, 1)})
    assert c.replica_counts() == {"a": 1}
    c.tablet_reports["t"] = TabletReportInfo("b", 1, 1, ("b", "c"), 0.0)
    assert c.replica_counts() == {"a": 0}
