"""The cache of serialized tablet locations (coordinator/locations.py) against the engine.

A real engine (the in-process cluster of test_engine: shared MemoryLogStore, real lease,
replay and operations) changes the catalog in every way that reaches a locations answer; after
each change the cached answer must equal the one the engine builds afresh, and between
changes lookups must be served from the cache.
"""

from __future__ import annotations

import pytest

from coordinator.catalog import Catalog, TabletInfo, TabletReportInfo
from coordinator.locations import LocationCache
from coordinator.ops.server_down import ServerDownRequest
from rpc.errors import BadRequest, NotFound
from rpc.protocols import coordinator_pb2 as pb
from tests.coordinator.test_engine import cluster, create, enlist  # noqa: F401 - fixture

__all__ = ["cluster"]


def test_cached_answers_follow_every_change_of_the_catalog(cluster):  # noqa: F811
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    table_id = a.engine.execute("create_table", create(n=4, rf=1)).table_id
    cache = LocationCache(a.catalog, a.engine.get_tablet_locations)
    by_name = pb.GetTabletLocationsRequest(name="t")
    by_id = pb.GetTabletLocationsRequest(table_id=table_id)

    def lookup(request: pb.GetTabletLocationsRequest) -> pb.GetTabletLocationsResponse:
        """The cached answer, checked against a fresh one built from the same catalog."""
        with a.catalog.lock:
            body = cache.lookup(request)
            fresh = a.engine.get_tablet_locations(request)
        answer = pb.GetTabletLocationsResponse.FromString(body)
        assert answer == fresh
        return answer

    def served_from_cache(request: pb.GetTabletLocationsRequest) -> bool:
        hits = cache.hits
        lookup(request)
        return cache.hits == hits + 1

    first = lookup(by_name)
    lookup(by_id)
    assert served_from_cache(by_name) and served_from_cache(by_id)
    tablet = first.tablets[0]
    owner = tablet.replicas[0].server_uuid
    other = next(f"s{i}" for i in range(3) if f"s{i}" != owner)

    # A heartbeat report from the tablet's leader: its committed config and leader.
    report = pb.TabletReport(
        tablet_id=tablet.tablet_id,
        role="LEADER",
        term=2,
        config_index=7,
        config_uuids=[owner, other],
        config_member_types=["VOTER", "NON_VOTER"],
        leader_uuid=owner,
    )
    a.engine.heartbeat(pb.HeartbeatRequest(server_uuid=owner, address="x:1", tablets=[report]))
    answer = lookup(by_name)
    assert answer.tablets[0].config_index == 7
    assert [r.server_uuid for r in answer.tablets[0].replicas] == [owner, other]
    assert served_from_cache(by_name)

    # A server moved to another address, then marked down.
    a.engine.execute("enlist_server", pb.EnlistServerRequest(server_uuid=other, address="h:9"))
    assert lookup(by_id).tablets[0].replicas[1].address == "h:9"
    a.engine.execute("server_down", ServerDownRequest(other, "test"), internal=True)
    assert lookup(by_id).tablets[0].replicas[1].server_state == "DOWN"
    assert served_from_cache(by_id)

    # A new schema version, then a rename: the old name is gone at once.
    alter = pb.AlterTableRequest(
        request_id=pb.RequestId(client_id="client", seq=2),
        name="t",
        add_columns=[pb.ColumnSchema(name="w", type=pb.INT32, nullable=True)],
    )
    a.engine.execute("alter_table", alter)
    assert lookup(by_name).schema_version == 2
    rename = pb.AlterTableRequest(
        request_id=pb.RequestId(client_id="client", seq=3), name="t", new_name="u"
    )
    a.engine.execute("alter_table", rename)
    with pytest.raises(NotFound):
        cache.lookup(by_name)
    assert lookup(pb.GetTabletLocationsRequest(name="u")).table_id == table_id
    assert lookup(by_id).table_id == table_id

    # Dropped: no answer by name or id, and nothing stale from the cache.
    drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=4), name="u")
    a.engine.execute("drop_table", drop)
    for request in (by_id, pb.GetTabletLocationsRequest(name="u")):
        with pytest.raises(NotFound):
            cache.lookup(request)


def test_bad_names_are_refused_and_not_cached(cluster):  # noqa: F811
    a = cluster.add("a")
    cluster.leader()
    cache = LocationCache(a.catalog, a.engine.get_tablet_locations)
    for name in ("", "x" * 300, "bad\nname"):
        with pytest.raises(BadRequest):
            cache.lookup(pb.GetTabletLocationsRequest(name=name))
    with pytest.raises(NotFound):
        cache.lookup(pb.GetTabletLocationsRequest(name="missing"))
    assert cache.hits == 0 and cache.misses == 0


def test_a_table_is_rebuilt_only_when_its_own_answer_changes(cluster):  # noqa: F811
    """Rebuilds counted (`LocationCache.misses`): a leader report for another table's
    tablet, a heartbeat without reports and a report that changes nothing the answer says do
    not rebuild a table's answer; a new leader report for its tablet, a rename and a drop
    do, each once."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    table_id = a.engine.execute("create_table", create("t", seq=1, n=1, rf=3)).table_id
    a.engine.execute("create_table", create("o", seq=2, n=1, rf=3))
    cache = LocationCache(a.catalog, a.engine.get_tablet_locations)
    by_name = pb.GetTabletLocationsRequest(name="t")
    by_id = pb.GetTabletLocationsRequest(table_id=table_id)

    def rebuilds(request: pb.GetTabletLocationsRequest) -> int:
        """Rebuilds of the answer to `request` by two lookups, checked against a fresh one."""
        misses = cache.misses
        for _ in range(2):
            with a.catalog.lock:
                body = cache.lookup(request)
                fresh = a.engine.get_tablet_locations(request)
            assert pb.GetTabletLocationsResponse.FromString(body) == fresh
        return cache.misses - misses

    def leader_report(tablet_id: str, leader: str, term: int, index: int) -> pb.TabletReport:
        return pb.TabletReport(
            tablet_id=tablet_id,
            role="LEADER",
            term=term,
            config_index=index,
            config_uuids=["s0", "s1", "s2"],
            config_member_types=["VOTER"] * 3,
            leader_uuid=leader,
        )

    def beat(server: str, *reports: pb.TabletReport) -> None:
        a.engine.heartbeat(
            pb.HeartbeatRequest(server_uuid=server, address=f"x:{server}", tablets=reports)
        )

    assert rebuilds(by_name) == 1 and rebuilds(by_id) == 1
    [tablet] = a.catalog.tables[table_id].tablet_ids
    [other] = a.catalog.table_by_name("o").tablet_ids

    # Another table's tablet gets a leader, then a new one; every server beats with nothing.
    beat("s0", leader_report(other, "s0", 2, 3))
    beat("s1", leader_report(other, "s1", 3, 3))
    for server in ("s0", "s1", "s2"):
        beat(server)
    assert rebuilds(by_name) == 0 and rebuilds(by_id) == 0

    # A new leader reported for the table's own tablet: one rebuild, which names it.
    beat("s1", leader_report(tablet, "s1", 2, 3))
    assert rebuilds(by_name) == 1 and rebuilds(by_id) == 1
    with a.catalog.lock:
        answer = pb.GetTabletLocationsResponse.FromString(cache.lookup(by_name))
    assert [r.server_uuid for r in answer.tablets[0].replicas if r.is_leader] == ["s1"]
    # The same leader reports again, nothing the answer says changed (a beat repeating it,
    # its last op index moved by writes): no rebuild.
    again = leader_report(tablet, "s1", 2, 3)
    again.last_op_index = 42
    beat("s1", again)
    assert rebuilds(by_name) == 0
    # Then a new term with another leader: rebuilt.
    beat("s2", leader_report(tablet, "s2", 3, 3))
    assert rebuilds(by_name) == 1

    # Renamed: the old name is gone at once, the new one and the id are answered afresh.
    rename = pb.AlterTableRequest(
        request_id=pb.RequestId(client_id="client", seq=3), name="t", new_name="u"
    )
    a.engine.execute("alter_table", rename)
    with pytest.raises(NotFound):
        cache.lookup(by_name)
    assert rebuilds(pb.GetTabletLocationsRequest(name="u")) == 1
    assert rebuilds(by_id) == 1

    # Dropped: nothing by name or id, nothing stale from the cache.
    drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=4), name="u")
    a.engine.execute("drop_table", drop)
    for request in (by_id, pb.GetTabletLocationsRequest(name="u")):
        with pytest.raises(NotFound):
            cache.lookup(request)


def test_every_table_keeps_its_answer_and_old_entries_age_out(cluster, monkeypatch):  # noqa: F811
    """The cache holds an answer per table however many tables there are (a fixed bound
    below the table count rebuilt every answer on every pass over them), and no more than
    two per table beyond ENTRIES_MIN: those of dropped tables age out."""
    from coordinator import locations

    monkeypatch.setattr(locations, "ENTRIES_MIN", 4, raising=False)
    monkeypatch.setattr(locations, "ENTRIES_MAX", 4, raising=False)  # (its name before)
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    names = [f"t{i}" for i in range(12)]
    for seq, name in enumerate(names, 1):
        a.engine.execute("create_table", create(name, seq=seq, n=1, rf=1))
    cache = LocationCache(a.catalog, a.engine.get_tablet_locations)

    def a_pass(names: list[str]) -> int:
        """Answers built by one lookup of each table, by name then by id."""
        misses = cache.misses
        for name in names:
            cache.lookup(pb.GetTabletLocationsRequest(name=name))
            table_id = a.catalog.names[name]
            cache.lookup(pb.GetTabletLocationsRequest(table_id=table_id))
        return cache.misses - misses

    assert a_pass(names) == 24
    assert a_pass(names) == 0 and a_pass(names) == 0
    for seq, name in enumerate(names[:8], 100):
        drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=seq), name=name)
        a.engine.execute("drop_table", drop)
    for seq, name in enumerate(["n0", "n1"], 200):  # new answers push the old ones out
        a.engine.execute("create_table", create(name, seq=seq, n=1, rf=1))
    assert a_pass(["n0", "n1"]) == 4
    assert a_pass(names[8:]) == 0
    assert len(cache._entries) <= 2 * len(a.catalog.tables) + 4


def test_every_source_of_an_answer_moves_the_generation():
    """`Catalog.locations_generation` moves at every kind of change of each dict an answer is
    built from, whichever way it is changed, and when the dict is replaced whole: an entry
    stamped at one generation is then never served past a change it did not see."""
    catalog = Catalog()
    values = {  # a fresh value of each dict's kind (its watchers read them)
        "tables": lambda: "t-value",
        "names": lambda: "table-id",
        "tablets": lambda: TabletInfo("k", "t", 0, 1, ("s1",)),
        "tablet_reports": lambda: TabletReportInfo("s1", 1, 1, ("s1",), 0.0),
        "servers": lambda: "s-value",
        "principals": lambda: "p-value",
    }
    for name, value in values.items():

        def moved(change, name=name) -> bool:
            before = catalog.locations_generation
            change(getattr(catalog, name))
            return catalog.locations_generation > before

        assert moved(lambda d, v=value: d.__setitem__("k", v())), name
        assert moved(lambda d, v=value: d.__setitem__("k", v())), name  # replaced
        assert moved(lambda d: d.pop("k")), name
        assert moved(lambda d, v=value: d.update(k=v())), name
        assert moved(lambda d: d.__delitem__("k")), name
        assert moved(lambda d, v=value: d.setdefault("k", v())), name
        assert moved(lambda d: d.popitem()), name
        assert moved(lambda d, v=value: d.__ior__({"k": v()})), name
        assert moved(lambda d: d.clear()), name
        assert not moved(lambda d: d.get("k")), name  # reads do not
        assert moved(lambda _d, name=name: setattr(catalog, name, {})), name


def test_a_hit_at_the_same_generation_checks_nothing(cluster, monkeypatch):  # noqa: F811
    """While the catalog's locations generation stands, a hit is served without the checks
    of the answer's sources (`_valid`); once anything moved it (a heartbeat's report), the
    sources are checked again, the answer adopted or built, and the entry stamped anew."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    a.engine.execute("create_table", create("t", seq=1, n=1, rf=3))
    cache = LocationCache(a.catalog, a.engine.get_tablet_locations)
    request = pb.GetTabletLocationsRequest(name="t")
    first = pb.GetTabletLocationsResponse.FromString(cache.lookup(request))
    checks: list[int] = []
    real_valid = cache._valid

    def counted(entry, key):
        checks.append(1)
        return real_valid(entry, key)

    monkeypatch.setattr(cache, "_valid", counted)
    for _ in range(3):
        assert cache.lookup(request) is not None
    assert checks == [] and cache.hits == 3 and cache.misses == 1
    tablet = first.tablets[0]
    leader = tablet.replicas[0].server_uuid
    report = pb.TabletReport(
        tablet_id=tablet.tablet_id,
        role="LEADER",
        term=2,
        config_index=1,
        config_uuids=[r.server_uuid for r in tablet.replicas],
        leader_uuid=leader,
    )
    a.engine.heartbeat(pb.HeartbeatRequest(server_uuid=leader, address="x:1", tablets=[report]))
    with a.catalog.lock:
        answer = pb.GetTabletLocationsResponse.FromString(cache.lookup(request))
        assert answer == a.engine.get_tablet_locations(request)
    assert checks == [1] and answer.tablets[0].config_index == 1
    cache.lookup(request)
    assert checks == [1]  # stamped anew: the next hit checks nothing
