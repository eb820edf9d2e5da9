"""What the replication round looks at (issue 28: an idle leader looked at every one of
10,000 tablets twice a second, and create_missing walked every tablet of every table).

The catalog keeps, as `tablets`, `tablet_reports` and `tables` change by whatever code, the
tablets with skipped replicas, the tablets changed since the round's last look, and a
generation of the tables: each must stay equal to (or cover) a recount after random changes,
and a round that looks only at the tablets it selects decides exactly what a round over
every tablet decides."""

from __future__ import annotations

import dataclasses
import random

import pytest

from coordinator.catalog import (
    Catalog,
    ServerInfo,
    ServerState,
    TableInfo,
    TableState,
    TabletInfo,
    TabletReportInfo,
)
from coordinator.replication import ReplicationConfig, ReplicationManager
from rpc.protocols import coordinator_pb2 as pb

SERVERS = [f"s{i}" for i in range(6)]


def _tablet(rng: random.Random, t: str) -> TabletInfo:
    replicas = tuple(rng.sample(SERVERS, 3))
    skipped = tuple(rng.sample(replicas, rng.randint(0, 2))) if rng.random() < 0.4 else ()
    return TabletInfo(t, "T", 0, 1, replicas, skipped)


def _report(rng: random.Random) -> TabletReportInfo:
    uuids = tuple(rng.sample(SERVERS, rng.randint(0, 4)))
    return TabletReportInfo(uuids[0] if uuids else "", 1, rng.randint(0, 9), uuids, 0.0)


@pytest.mark.parametrize("seed", range(20))
def test_skipped_and_touched_follow_every_change(seed: int):
    rng = random.Random(seed)
    c = Catalog()
    ids = [f"t{i}" for i in range(12)]
    c.take_touched()
    for _ in range(400):
        before_tablets, before_reports = dict(c.tablets), dict(c.tablet_reports)
        before_gen = c.tables_generation
        t = rng.choice(ids)
        op = rng.randrange(13)
        table_changed = False
        if op <= 2:
            c.tablets[t] = _tablet(rng, t)
        elif op <= 4:
            c.tablet_reports[t] = _report(rng)
        elif op == 5:
            c.tablets.pop(t, None)
        elif op == 6:
            c.tablet_reports.pop(t, None)
        elif op == 7 and t in c.tablets:
            del c.tablets[t]
        elif op == 8:
            c.tablets.setdefault(t, _tablet(rng, t))
        elif op == 9:
            rebuilt = Catalog()
            for k in rng.sample(ids, 5):
                rebuilt.tablets[k] = _tablet(rng, k)
            c.adopt_logged(rebuilt)
            table_changed = True
        elif op == 10:
            c.put_table(TableInfo(t, t, pb.Schema(), 3, (t,), TableState.RUNNING, 1))
            table_changed = True
        elif op == 11:
            c.remove_table(rng.choice(list(c.tables) or [t]))
            table_changed = bool(c.tables) or t in before_tablets
        elif rng.random() < 0.2:
            c.tablets.clear()
        assert c.skipped_tablets() == c.skipped_tablets_recounted()
        changed = {
            k
            for k in set(before_tablets) | set(c.tablets)
            if before_tablets.get(k) != c.tablets.get(k)
        } | {
            k
            for k in set(before_reports) | set(c.tablet_reports)
            if before_reports.get(k) != c.tablet_reports.get(k)
        }
        touched = c.take_touched()
        assert touched is not None and changed <= touched
        if table_changed and op != 11:
            assert c.tables_generation != before_gen
    c.tablets.clear()
    assert c.skipped_tablets() == frozenset()


def test_a_catalog_built_with_tablets_lists_its_skipped_ones():
    a = TabletInfo("a", "T", 0, 1, ("x", "y"), ("x",))
    b = TabletInfo("b", "T", 0, 1, ("x", "y"))
    c = Catalog(tablets={"a": a, "b": b})
    assert c.skipped_tablets() == {"a"}
    assert c.take_touched() == {"a", "b"} and c.take_touched() == set()
    generation = c.tables_generation
    c.tables["T"] = TableInfo("T", "n", pb.Schema(), 3, ("a", "b"), TableState.RUNNING, 1)
    assert c.tables_generation != generation


class _Recording(ReplicationManager):
    """The policy with its calls to tablet servers recorded and refused (the round's
    decisions, no network): every round decides again."""

    def __init__(self, catalog: Catalog, full_pass_s: float) -> None:
        config = ReplicationConfig(changes_per_round_max=100_000, full_pass_s=full_pass_s)
        super().__init__(catalog, "me", lambda: True, config)
        self.actions: list = []

    def _execute(self, action) -> bool:
        self.actions.append(action)
        return False

    def decisions_over_all(self) -> set:
        """A round over every tablet, as before the selection (the catalog's list of
        changed tablets left to `decisions`: it has one reader)."""
        self._look_at = lambda: (None, None)
        return self.decisions()

    def decisions(self) -> set:
        self.actions = []
        self.run_round()
        return set(self.actions)


def _healthy_report(rng: random.Random, replicas: tuple[str, ...]) -> TabletReportInfo:
    leader = rng.choice(replicas)
    return TabletReportInfo(leader, 1, 5, replicas, 0.0, leader, "LEADER", ("VOTER",) * 3)


def _catalog_of_60(rng: random.Random, unhealthy: float = 0.0) -> Catalog:
    """Six live servers, 60 one-tablet tables of factor 3; a share of them `unhealthy` (a
    report of 2 or 4 voters), the others healthy."""
    c = Catalog()
    for u in SERVERS:
        c.servers[u] = ServerInfo(u, "127.0.0.1:1", ServerState.LIVE, 1)
    for i in range(60):
        tid = f"T{i}"
        c.put_table(TableInfo(tid, tid, pb.Schema(), 3, (f"t{i}",), TableState.RUNNING, 1))
        replicas = tuple(rng.sample(SERVERS, 3))
        c.tablets[f"t{i}"] = TabletInfo(f"t{i}", tid, 0, 1, replicas)
        uuids = tuple(rng.sample(SERVERS, rng.choice((2, 4))))
        c.tablet_reports[f"t{i}"] = (
            TabletReportInfo(uuids[0], 1, 5, uuids, 0.0, uuids[0], "LEADER", ("VOTER",) * 4)
            if rng.random() < unhealthy
            else _healthy_report(rng, replicas)
        )
    return c


@pytest.mark.parametrize("seed", range(10))
def test_a_round_over_the_selected_tablets_decides_as_one_over_all(seed: int):
    rng = random.Random(seed)
    c = _catalog_of_60(rng)
    incremental = _Recording(c, full_pass_s=1e9)  # never a full pass but for a reason
    incremental.decisions()
    created = 60
    for _ in range(60):
        op = rng.randrange(11)
        t = rng.choice(sorted(c.tablets))
        if op <= 2:  # a new config: a member missing, added, a NON_VOTER, another leader
            uuids = tuple(rng.sample(SERVERS, rng.randint(2, 4)))
            types = tuple(rng.choice(("VOTER", "VOTER", "NON_VOTER")) for _ in uuids)
            c.tablet_reports[t] = TabletReportInfo(
                uuids[0], 1, rng.randint(5, 9), uuids, 0.0, uuids[0], "LEADER", types
            )
        elif op == 3:  # healthy again
            c.tablet_reports[t] = _healthy_report(rng, c.tablets[t].replicas)
        elif op == 4:  # a server down or back
            u = rng.choice(SERVERS)
            state = rng.choice((ServerState.LIVE, ServerState.DOWN))
            c.servers[u] = ServerInfo(u, "127.0.0.1:1", state, 1)
        elif op == 5:  # a replica FAILED, or no longer
            if rng.random() < 0.5:
                c.failed_replicas.setdefault(t, set()).add(rng.choice(SERVERS))
            else:
                c.failed_replicas.pop(t, None)
        elif op == 6:  # the factor of a table changed
            table = c.tables[c.tablets[t].table_id]
            c.put_table(dataclasses.replace(table, replication_factor=rng.choice((1, 3, 5))))
        elif op == 7:  # a table created (CREATING, then RUNNING), its report healthy or not
            tid, t = f"T{created}", f"t{created}"
            created += 1
            replicas = tuple(rng.sample(SERVERS, 3))
            table = TableInfo(tid, tid, pb.Schema(), 3, (t,), TableState.CREATING, 1)
            c.put_table(table)
            c.tablets[t] = TabletInfo(t, tid, 0, 1, replicas)
            if rng.random() < 0.5:
                c.tablet_reports[t] = _healthy_report(rng, replicas)
            else:
                uuids = replicas[:2]
                c.tablet_reports[t] = TabletReportInfo(
                    uuids[0], 1, 5, uuids, 0.0, uuids[0], "LEADER", ("VOTER",) * 2
                )
            if rng.random() < 0.5:
                incremental.decisions()  # a round between its STARTED and its DONE
                assert incremental.decisions() == _Recording(c, 1e9).decisions_over_all()
            c.put_table(dataclasses.replace(table, state=TableState.RUNNING))
        elif op == 8 and len(c.tables) > 10:  # a table dropped
            c.remove_table(c.tablets[t].table_id)
        else:
            retired = rng.random() < 0.3
            c.retirements[rng.choice(SERVERS)] = (retired, 1)
        everything = _Recording(c, full_pass_s=1e9).decisions_over_all()
        assert incremental.decisions() == everything
        assert incremental.decisions() == everything  # and again, nothing having changed


@pytest.mark.parametrize("seed", range(4))
def test_a_round_read_in_chunks_decides_as_one_read_at_once(seed: int, monkeypatch):
    """`_snapshot` reads SNAPSHOT_CHUNK tablets per hold of the catalog lock (a full pass at
    10,000 tablets in one hold stalled every request): with chunks of 7, a full pass takes
    the lock once per chunk and decides what one read in a single hold does."""
    c = _catalog_of_60(random.Random(seed), unhealthy=0.4)
    whole = _Recording(c, full_pass_s=1e9).decisions_over_all()
    assert whole  # (some tablets need a change)

    class Counting:
        def __init__(self, lock) -> None:
            self.lock, self.holds = lock, 0

        def __enter__(self):
            self.lock.acquire()
            self.holds += 1

        def __exit__(self, *exc) -> None:
            self.lock.release()

    from coordinator import replication

    monkeypatch.setattr(replication, "SNAPSHOT_CHUNK", 7)
    counting = c.lock = Counting(c.lock)
    before = counting.holds
    _Recording(c, full_pass_s=1e9)._snapshot(None)
    assert counting.holds - before >= 60 // 7 + 1
    assert _Recording(c, full_pass_s=1e9).decisions_over_all() == whole
