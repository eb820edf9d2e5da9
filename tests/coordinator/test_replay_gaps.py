"""A lagging replay must end with the catalog a replay of the live log from scratch gives.

A follower reads only live records. When it applied a record X and a later record Y that
invalidated X was itself invalidated before the follower read it (CreateTable STARTED, its
DONE, then DropTable DONE making that DONE moot), the follower never learns X is dead. In CI
this left a create_table operation pending at a follower that later led, and its recovery
looped on "cannot invalidate #5: no live entry".

The leader here is a real Engine over a MemoryLogStore (which passes the logstore contract
suite); the follower is a Replayer driven by hand at seeded points, including in the middle of
operations (from the tablet-server calls of `complete`).
"""

from __future__ import annotations

import random

import pytest
from test_engine import Cluster, MemoryGateway, create

from coordinator.catalog import Catalog
from coordinator.leases.driver import LOG_NAME
from coordinator.ops.server_down import ServerDownRequest
from coordinator.replay.replayer import Replayer
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb


def logged(catalog: Catalog) -> dict:
    """The logged state, minus the last Lease (renewals come and go with time)."""
    with catalog.lock:
        return {
            "tables": dict(catalog.tables),
            "names": dict(catalog.names),
            "tablets": dict(catalog.tablets),
            "servers": dict(catalog.servers),
            "pending": {k: (v.kind, v.record) for k, v in catalog.pending.items()},
            "sessions": {c: dict(r) for c, r in catalog.sessions.items()},
        }


def from_scratch(cluster: Cluster, through: int) -> Catalog:
    fresh = Catalog()
    Replayer(cluster.store, fresh).apply_through(through)
    return fresh


class PeekingGateway(MemoryGateway):
    """Lets the follower read the log in the middle of an operation, at seeded calls."""

    def __init__(self) -> None:
        super().__init__()
        self.peek = lambda: None

    def create_tablet(self, *args, **kw):
        self.peek()
        return super().create_tablet(*args, **kw)

    def delete_tablet(self, *args, **kw):
        self.peek()
        return super().delete_tablet(*args, **kw)

    def alter_schema(self, *args, **kw):
        self.peek()
        return super().alter_schema(*args, **kw)


@pytest.fixture
def cluster():
    c = Cluster()
    c.gateway = PeekingGateway()
    yield c
    c.close()


def enlist(node, uuids: list[str]) -> None:
    for uuid in uuids:
        node.engine.execute(
            "enlist_server", pb.EnlistServerRequest(server_uuid=uuid, address="h:1")
        )


def catch_up(follower: Replayer, cluster: Cluster) -> None:
    follower.apply_through(cluster.store.last_id(LOG_NAME))


def peek_once(follower: Replayer, cluster: Cluster) -> None:
    """The follower reads the log at the next tablet-server call of an operation, once."""
    peeked = []

    def peek():
        if not peeked:
            peeked.append(True)
            catch_up(follower, cluster)

    cluster.gateway.peek = peek


def test_a_done_made_moot_before_it_was_read(cluster):
    """The CI failure, step by step: STARTED read, then DONE and DropTable DONE unread."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a, ["s0", "s1"])
    follower = Replayer(cluster.store, Catalog())
    peek_once(follower, cluster)
    a.engine.execute("create_table", create(n=2, rf=1))
    assert follower.catalog.pending, "the follower read the STARTED record"
    cluster.gateway.peek = lambda: None
    drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=2), name="t")
    a.engine.execute("drop_table", drop)

    catch_up(follower, cluster)
    assert follower.rebuilds == 1
    assert follower.catalog.pending == {} and follower.catalog.tables == {}
    assert logged(follower.catalog) == logged(from_scratch(cluster, follower.catalog.applied_id))
    # Its refs are all live again: a later replay does not rebuild.
    a.engine.execute("create_table", create(name="u", seq=3, n=1, rf=1))
    catch_up(follower, cluster)
    assert follower.rebuilds == 1 and set(follower.catalog.names) == {"u"}


def test_a_new_leader_verifies_what_its_catalog_rests_on(cluster):
    """`verify` (run by recovery before completing anything) finds a dead reference even
    where no gap was read: here the follower has read nothing since the STARTED record."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a, ["s0", "s1"])
    follower = Replayer(cluster.store, Catalog())
    cluster.gateway.peek = lambda: follower.apply_through(cluster.store.last_id(LOG_NAME))
    a.engine.execute("create_table", create(n=1, rf=1))
    cluster.gateway.peek = lambda: None
    assert follower.catalog.pending
    # Its STARTED record is dead, but by the DONE not yet read: applying that handles it.
    assert follower.verify() is False
    drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=2), name="t")
    a.engine.execute("drop_table", drop)
    assert follower.verify() is True
    assert follower.catalog.pending == {} and follower.catalog.tables == {}
    assert logged(follower.catalog) == logged(from_scratch(cluster, follower.catalog.applied_id))
    assert follower.verify() is False  # all it rests on is live now


def alter(seq: int, column: str) -> pb.AlterTableRequest:
    return pb.AlterTableRequest(
        request_id=pb.RequestId(client_id="client", seq=seq),
        name="t",
        add_columns=[pb.ColumnSchema(name=column, type=pb.INT32, nullable=True)],
    )


def test_an_alter_made_moot_by_the_next_before_it_was_read(cluster):
    """The follower reads AlterTable #2's STARTED; #2's DONE (which invalidates it) is made
    moot by #3's DONE before the follower reads on. Without the rebuild it keeps #2 pending,
    and as leader would try to invalidate the dead STARTED record again and again."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a, ["s0", "s1"])
    a.engine.execute("create_table", create(n=2, rf=1))
    a.engine.execute("alter_table", alter(2, "w1"))
    follower = Replayer(cluster.store, Catalog())
    peek_once(follower, cluster)
    a.engine.execute("alter_table", alter(3, "w2"))
    assert [p.kind for p in follower.catalog.pending.values()] == ["alter_table"]
    cluster.gateway.peek = lambda: None
    a.engine.execute("alter_table", alter(4, "w3"))

    catch_up(follower, cluster)
    assert follower.rebuilds == 1 and follower.catalog.pending == {}
    table = follower.catalog.table_by_name("t")
    assert [c.name for c in table.schema.columns] == ["id", "v", "w1", "w2", "w3"]
    assert logged(follower.catalog) == logged(from_scratch(cluster, follower.catalog.applied_id))
    # Every request's result survives, also those of records no longer live.
    for seq, version in [(2, 2), (3, 3), (4, 4)]:
        assert follower.catalog.session_result("client", seq).schema_version == version


def test_set_replication_results_survive_their_records(cluster):
    """A SetReplication record invalidated by the next one (or by DropTable) carries its
    request's result on, so a leader replaying the live log still answers the retry."""
    a = cluster.add("a")
    cluster.leader()
    enlist(a, ["s0", "s1"])
    a.engine.execute("create_table", create(n=1, rf=1))
    for seq, rf in [(2, 2), (3, 1)]:
        rid = pb.RequestId(client_id="client", seq=seq)
        request = pb.SetReplicationRequest(request_id=rid, name="t", replication_factor=rf)
        a.engine.execute("set_replication", request)
    fresh = from_scratch(cluster, cluster.store.last_id(LOG_NAME))
    table_id = fresh.table_by_name("t").table_id
    assert fresh.session_result("client", 2).table_id == table_id
    drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=4), name="t")
    a.engine.execute("drop_table", drop)
    fresh = from_scratch(cluster, cluster.store.last_id(LOG_NAME))
    assert fresh.tables == {}
    for seq in (1, 2, 3, 4):
        assert fresh.session_result("client", seq).table_id == table_id, seq


SERVERS = [f"s{i}" for i in range(4)]
TABLES = ["t0", "t1", "t2"]


def random_op(rng: random.Random, seq: int):
    rid = pb.RequestId(client_id=f"client{seq % 3}", seq=seq)
    name = rng.choice(TABLES)
    kind = rng.choice(
        ["enlist", "create", "create", "alter", "replication", "drop", "drop", "down", "remove"]
    )
    if kind == "enlist":
        uuid = rng.choice(SERVERS)
        return "enlist_server", pb.EnlistServerRequest(server_uuid=uuid, address=f"h:{seq + 1}")
    if kind == "create":
        req = create(name=name, seq=seq, n=rng.randint(1, 3), rf=rng.randint(1, 2))
        req.request_id.CopyFrom(rid)
        return "create_table", req
    if kind == "alter":
        column = pb.ColumnSchema(name=f"c{seq}", type=pb.INT32, nullable=True)
        return "alter_table", pb.AlterTableRequest(request_id=rid, name=name, add_columns=[column])
    if kind == "replication":
        rf = rng.randint(1, 2)
        return "set_replication", pb.SetReplicationRequest(
            request_id=rid, name=name, replication_factor=rf
        )
    if kind == "drop":
        return "drop_table", pb.DropTableRequest(request_id=rid, name=name)
    if kind == "down":
        return "server_down", ServerDownRequest(rng.choice(SERVERS), "test")
    return "remove_server", pb.RemoveServerRequest(request_id=rid, server_uuid=rng.choice(SERVERS))


@pytest.mark.parametrize("seed", range(6))
def test_model_check_of_a_lagging_replay(cluster, seed):
    """Random operations; the follower reads at random points, mid-operation too. After
    every operation its catalog equals a from-scratch replay of the live log."""
    rng = random.Random(seed)
    a = cluster.add("a")
    cluster.leader()
    enlist(a, SERVERS[:2])
    follower = Replayer(cluster.store, Catalog())

    def peek():
        if rng.random() < 0.3:
            catch_up(follower, cluster)

    cluster.gateway.peek = peek
    done = 0
    for seq in range(1, 120):
        kind, request = random_op(rng, seq)
        try:
            a.engine.execute(kind, request, internal=kind == "server_down")
            done += 1
        except RpcError:
            pass  # a bad request for the current state: nothing logged
        if rng.random() < 0.4:
            catch_up(follower, cluster)
            want = from_scratch(cluster, follower.catalog.applied_id)
            assert logged(follower.catalog) == logged(want), f"seed {seed}, op {seq} {kind}"
    catch_up(follower, cluster)
    assert logged(follower.catalog) == logged(from_scratch(cluster, follower.catalog.applied_id))
    assert done > 40, done  # the workload did work, not only refusals
    assert a.replayer.rebuilds == 0  # the leader applies all it writes: never a rebuild
