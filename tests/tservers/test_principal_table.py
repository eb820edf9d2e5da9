"""The principals table pushed to tablet servers (coordinator/principal_push.py) and a tablet
server's copy of it (tservers/principals.py), without sockets: versions, states in force,
the key/UUID check of heartbeats, the role check and the leader-silence rule (its clock a
counter the test moves, so nothing depends on time)."""

from __future__ import annotations

import pytest

from coordinator.catalog import Catalog, PrincipalInfo
from coordinator.principal_push import (
    CatalogServerKeys,
    KeyMismatch,
    PrincipalsPush,
    check_server_key,
    table_of,
)
from rpc.errors import PermissionDenied, Unavailable
from rpc.keys import KeyPair
from rpc.protocols import coordinator_pb2 as pb
from tservers.principals import PrincipalCache, TableServerKeys

KEYS = {name: KeyPair.generate().public for name in ("ts1", "ts2", "c1", "rita", "bob", "new")}


def info(name, kind, roles, *, state="active", active=True, pending=0, record=1):
    return PrincipalInfo(
        name=name,
        kind=kind,
        public_key=KEYS[name],
        roles=tuple(roles),
        state=state,
        record_id=record,
        pending_op_id=pending,
        in_force_roles=tuple(roles) if active else (),
        in_force_active=active,
    )


def catalog() -> Catalog:
    c = Catalog()
    for p in (
        info("ts1", "tserver", ["server"]),
        info("ts2", "tserver", ["server"]),
        info("c1", "coordinator", ["server"]),
        info("rita", "user", ["reader"]),
        info("bob", "user", ["writer"], state="revoked", active=False),
        info("new", "user", ["admin"], active=False, pending=7),  # added, not done
    ):
        c.principals[p.name] = p
        if p.state != "revoked":
            c.principal_keys[p.public_key] = p.name
    c.applied_id = 10
    return c


def test_the_table_has_every_principal_in_force_and_a_stable_version():
    c = catalog()
    table = table_of(c)
    states = {e.name: (e.state, tuple(e.roles)) for e in table.entries}
    assert states == {
        "ts1": ("active", ("server",)),
        "ts2": ("active", ("server",)),
        "c1": ("active", ("server",)),
        "rita": ("active", ("reader",)),
        "bob": ("revoked", ()),
        "new": ("pending", ()),
    }
    assert [e.name for e in table.entries] == sorted(states)
    assert table.version != 0
    assert table_of(catalog()).version == table.version  # same table, same version anywhere
    c.principals["rita"] = info("rita", "user", ["reader"], state="revoked", active=False)
    assert table_of(c).version != table.version


def test_the_push_carries_the_table_only_when_the_version_differs():
    c = catalog()
    push = PrincipalsPush(c)
    first = pb.HeartbeatResponse(is_leader=True)
    push.answer(first, 0)
    assert first.HasField("principals") and len(first.principals.entries) == 6
    again = pb.HeartbeatResponse(is_leader=True)
    push.answer(again, first.principals.version)
    assert not again.HasField("principals") and push.pushed == 1
    # Rebuilt once the catalog applied another record: a revocation changes the version.
    c.principals["rita"] = info("rita", "user", ["reader"], state="revoked", active=False)
    assert push.table().version == first.principals.version  # same applied id: cached
    c.applied_id += 1
    changed = pb.HeartbeatResponse(is_leader=True)
    push.answer(changed, first.principals.version)
    assert changed.principals.version != first.principals.version


def test_a_heartbeat_key_must_be_the_named_servers():
    c = catalog()
    check_server_key(c, "ts1", KEYS["ts1"])
    cases = {
        ("ts1", KEYS["ts2"]): "tablet server ts2 may not speak for tablet server ts1",
        ("ts1", KEYS["c1"]): "coordinator principal 'c1' is not a tablet server's",
        ("ts1", KEYS["rita"]): "user principal 'rita' is not a tablet server's",
        ("ts1", KEYS["bob"]): "not an admitted principal's",  # revoked: key free
        ("new", KEYS["new"]): "not an admitted principal's",  # added, not done
        ("ts1", KeyPair.generate().public): "not an admitted principal's",
    }
    for (uuid, key), message in cases.items():
        with pytest.raises(KeyMismatch, match=message):
            check_server_key(c, uuid, key)
    assert issubclass(KeyMismatch, PermissionDenied)


def test_peer_keys_come_from_the_table_by_uuid():
    own = KeyPair.generate()
    c = catalog()
    coordinator_side = CatalogServerKeys(own, c)
    assert coordinator_side.server_key("ts1") == KEYS["ts1"]
    assert coordinator_side.server_key("c1") == ""  # not a tablet server
    assert coordinator_side.server_key("rita") == ""
    assert coordinator_side.server_key("unknown") == ""
    cache = PrincipalCache("ts1", KEYS["ts1"])
    cache.heard_leader(table_of(c))
    tserver_side = TableServerKeys(own, cache)
    assert tserver_side.server_key("ts2") == KEYS["ts2"]
    assert tserver_side.server_key("c1") == "" and tserver_side.server_key("") == ""


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_tablet_servers_cache_admits_and_checks_calls():
    clock = Clock()
    coordinator_key = KeyPair.generate().public
    cache = PrincipalCache(
        "ts1", KEYS["ts1"], (coordinator_key,), leader_silence_s=30.0, clock=clock
    )
    # Before any table: only its own key and the coordinators'.
    assert cache.authorize_key(KEYS["rita"]) is None
    assert cache.authorize_key(coordinator_key).roles == ("server",)
    cache.heard_leader(table_of(catalog()))
    assert cache.version != 0
    rita = cache.authorize_key(KEYS["rita"])
    assert rita is not None and rita.roles == ("reader",)
    assert cache.authorize_key(KEYS["bob"]) is None  # revoked
    assert cache.authorize_key(KEYS["new"]) is None  # not done yet
    cache.check("TServer.Scan", rita)
    with pytest.raises(PermissionDenied) as err:
        cache.check("TServer.Write", rita)
    assert err.value.message == (
        "permission denied: TServer.Write needs the writer role; the caller has reader"
    )
    ts2 = cache.authorize_key(KEYS["ts2"])
    cache.check("TServer.Consensus", ts2)
    with pytest.raises(PermissionDenied, match="needs the server role"):
        cache.check("TServer.DeleteTablet", rita)
    # Silence past the limit: users refused, the cluster's own calls go on.
    clock.now += 30.5
    with pytest.raises(Unavailable, match="heard no coordinator leader for 30 s"):
        cache.check("TServer.Scan", rita)
    cache.check("TServer.Consensus", ts2)
    cache.heard_leader()  # a leader's answer without a table (same version)
    cache.check("TServer.Scan", rita)
    assert cache.refused_stale == 1
    # A new table replaces the old whole: rita revoked.
    c = catalog()
    c.principals["rita"] = info("rita", "user", ["reader"], state="revoked", active=False)
    cache.heard_leader(table_of(c))
    assert cache.authorize_key(KEYS["rita"]) is None
