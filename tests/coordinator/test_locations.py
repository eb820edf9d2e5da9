"""The cache of serialized tablet locations (coordinator/locations.py) against the engine.

A real engine (the in-process cluster of test_engine: shared MemoryLogStore, real lease,
replay and operations) changes the catalog in every way that reaches a locations answer; after
each change the cached answer must equal the one the engine builds afresh, and between
changes lookups must be served from the cache.
"""

from __future__ import annotations

import pytest

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
