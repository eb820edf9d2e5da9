"""The engine in process: lease, replay, recovery, exactly-once and every crash point.

Nodes share one MemoryLogStore; tablet servers are an in-memory gateway that records the
idempotent calls (the real tablet-server protocol is exercised by the node integration
tests). A crash point raises `Crashed` in the calling thread; the test then kills the node
(its lease stops renewing, its threads stop) and lets another node take over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest

from coordinator.catalog import Catalog, ServerInfo, ServerState, TableState
from coordinator.crashpoints import ALL_POINTS, CrashPoints, points_of
from coordinator.engine import Engine, EngineConfig
from coordinator.leases import LeaseConfig
from coordinator.leases.driver import LOG_NAME, LeaseDriver
from coordinator.ops import decode
from coordinator.ops.server_down import ServerDownRequest
from coordinator.replay.replayer import Replayer
from logstore.memory import MemoryLogStore
from rpc.errors import BadRequest, NoSpace, NotLeader, TabletDeleted, Unavailable
from rpc.protocols import coordinator_pb2 as pb

LEASE = LeaseConfig(
    lease_timeout_s=0.4,
    renew_interval_s=0.08,
    drift_margin_s=0.04,
    backoff_min_s=0.01,
    backoff_max_s=0.1,
)


class Crashed(BaseException):
    pass


def crash_exit(status: int) -> None:
    raise Crashed(status)


class MemoryGateway:
    """Tablet servers as seen through the gateway: (server, tablet) -> schema version."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replicas: dict[tuple[str, str], int] = {}
        self.deleted: set[tuple[str, str]] = set()
        self.unreachable: set[str] = set()
        self.refusing: set[str] = set()  # servers answering BAD_REQUEST to everything
        self.full: set[str] = set()  # servers answering NO_SPACE to creates (at a limit)
        self.calls = 0

    def _enter(self, server: ServerInfo) -> None:
        self.calls += 1
        if server.uuid in self.unreachable:
            raise Unavailable(f"{server.uuid} unreachable")
        if server.uuid in self.refusing:
            raise BadRequest(f"{server.uuid} refuses it")

    def create_tablet(self, server, table_id, table_name, tablet, schema, peers, timeout_s):
        with self.lock:
            self._enter(server)
            if server.uuid in self.full:
                raise NoSpace(f"{server.uuid} hosts its limit of tablets")
            key = (server.uuid, tablet.tablet_id)
            assert key not in self.deleted, "tablet ids are never reused"
            self.replicas.setdefault(key, schema.version)

    def delete_tablet(self, server, tablet_id, timeout_s):
        with self.lock:
            self._enter(server)
            self.replicas.pop((server.uuid, tablet_id), None)
            self.deleted.add((server.uuid, tablet_id))

    def alter_schema(self, server, tablet_id, old_schema, new_schema, timeout_s):
        with self.lock:
            self._enter(server)
            key = (server.uuid, tablet_id)
            if key in self.deleted:  # as a real tablet server answers a tombstoned tablet
                raise TabletDeleted(f"tablet {tablet_id} is deleted")
            if key in self.replicas:
                self.replicas[key] = max(self.replicas[key], new_schema.version)


class Node:
    def __init__(
        self,
        name: str,
        store: MemoryLogStore,
        gateway: MemoryGateway,
        crash: CrashPoints | None = None,
        tserver_timeout_s: float = 60.0,
    ) -> None:
        self.name = name
        self.catalog = Catalog()
        self.replayer = Replayer(store, self.catalog, poll_interval_s=0.02, name=f"replay-{name}")
        self.engine: Engine
        self.lease = LeaseDriver(
            store,
            name,
            f"{name}:1",
            LEASE,
            seed=hash(name) & 0xFFFF,
            on_role_change=lambda role, epoch: self.engine.on_role_change(role, epoch),
        )
        self.engine = Engine(
            self.catalog,
            self.lease,
            self.replayer,
            gateway,
            crash or CrashPoints(),
            EngineConfig(
                tserver_timeout_s=tserver_timeout_s, result_wait_s=5.0, monitor_interval_s=0.05
            ),
        )
        self.alive = False

    def start(self) -> Node:
        self.replayer.start()
        self.engine.start()
        self.lease.start()
        self.alive = True
        return self

    def kill(self) -> None:
        """Like kill -9 as far as the log can tell: no more appends of any kind."""
        if self.alive:
            self.alive = False
            self.lease.close()
            self.engine.close()
            self.replayer.close()


def wait_for(cond: Callable[[], object], timeout_s: float = 10.0) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError("condition not met before the deadline")


class Cluster:
    def __init__(self) -> None:
        self.store = MemoryLogStore()
        self.gateway = MemoryGateway()
        self.nodes: list[Node] = []

    def add(self, name: str, **kw) -> Node:
        node = Node(name, self.store, self.gateway, **kw).start()
        self.nodes.append(node)
        return node

    def leader(self, among: Sequence[Node] | None = None) -> Node:
        nodes = [n for n in (among or self.nodes) if n.alive]
        return wait_for(lambda: next((n for n in nodes if n.engine.serving()), None))

    def close(self) -> None:
        for n in self.nodes:
            n.kill()

    def records(self, kind: str) -> list[pb.LogRecord]:
        out = []
        for e in self.store.read(LOG_NAME, 1, 100_000):
            record = decode(e.data)
            if record.WhichOneof("record") == kind:
                out.append(record)
        return out


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def enlist(engine: Engine, n: int = 3) -> None:
    for i in range(n):
        engine.execute(
            "enlist_server",
            pb.EnlistServerRequest(server_uuid=f"s{i}", address=f"127.0.0.1:{i + 1}"),
        )


SCHEMA = pb.Schema(
    columns=[
        pb.ColumnSchema(name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(name="v", type=pb.STRING, nullable=True),
    ]
)


def create(name: str = "t", seq: int = 1, n: int = 4, rf: int = 3) -> pb.CreateTableRequest:
    return pb.CreateTableRequest(
        request_id=pb.RequestId(client_id="client", seq=seq),
        name=name,
        schema=SCHEMA,
        num_tablets=n,
        replication_factor=rf,
    )


# ---------------------------------------------------------------- basic service


def test_create_describe_locations_drop(cluster):
    a = cluster.add("a")
    leader = cluster.leader()
    assert leader is a
    enlist(a.engine)
    resp = a.engine.execute("create_table", create())
    assert resp.table_id.startswith("t")
    desc = a.engine.describe_table(pb.DescribeTableRequest(name="t"))
    assert desc.state == "RUNNING" and desc.num_tablets == 4 and desc.schema.version == 1
    locs = a.engine.get_tablet_locations(pb.GetTabletLocationsRequest(name="t"))
    assert len(locs.tablets) == 4
    assert all(len(t.replicas) == 3 for t in locs.tablets)
    assert len(cluster.gateway.replicas) == 12
    assert [t.name for t in a.engine.list_tables().tables] == ["t"]
    assert len(a.engine.list_servers().servers) == 3
    alter = pb.AlterTableRequest(
        request_id=pb.RequestId(client_id="client", seq=2),
        name="t",
        add_columns=[pb.ColumnSchema(name="w", type=pb.INT32, nullable=True)],
    )
    assert a.engine.execute("alter_table", alter).schema_version == 2
    assert set(cluster.gateway.replicas.values()) == {2}
    drop = pb.DropTableRequest(request_id=pb.RequestId(client_id="client", seq=3), name="t")
    assert a.engine.execute("drop_table", drop).table_id == resp.table_id
    assert not cluster.gateway.replicas and len(cluster.gateway.deleted) == 12
    assert a.engine.list_tables().tables == []


def test_exactly_once_retry_returns_the_same_result(cluster):
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    first = a.engine.execute("create_table", create(seq=7))
    again = a.engine.execute("create_table", create(seq=7))
    assert again.table_id == first.table_id
    assert len(cluster.records("create_table")) == 1
    # The same name under a new request id is a different request: it fails cleanly.
    with pytest.raises(Exception, match="exists"):
        a.engine.execute("create_table", create(seq=8))


def test_bad_input_logs_nothing(cluster):
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine, 1)
    before = cluster.store.last_id(LOG_NAME)
    with pytest.raises(BadRequest):
        a.engine.execute("create_table", create(rf=3))  # one live server
    with pytest.raises(BadRequest):
        a.engine.execute("create_table", create(n=0))
    after = [
        e
        for e in cluster.store.read(LOG_NAME, before + 1, 100)
        if decode(e.data).WhichOneof("record") != "lease"
    ]
    assert after == []
    assert a.engine.serving()  # a refused decision does not cost the lease


def test_follower_answers_not_leader_with_hint(cluster):
    cluster.add("a")
    cluster.leader()
    b = cluster.add("b")
    wait_for(lambda: b.engine.hint().uuid == "a")
    with pytest.raises(NotLeader) as info:
        b.engine.execute("create_table", create())
    assert info.value.leader_hint.address == "a:1"
    with pytest.raises(NotLeader):
        b.engine.list_tables()
    assert b.engine.get_leader().leader_uuid == "a"
    assert b.engine.status("b", "b:1").role == "FOLLOWER"


def test_followers_replay_the_log(cluster):
    a = cluster.add("a")
    cluster.leader()
    b = cluster.add("b")
    enlist(a.engine)
    a.engine.execute("create_table", create())
    wait_for(
        lambda: "t" in b.catalog.names and b.catalog.table_by_name("t").state is TableState.RUNNING
    )
    assert b.catalog.tablets == a.catalog.tablets


def create_then_crash_at_its_commit_point(cluster) -> Node:
    """A leader that logs a CreateTable STARTED and crashes before calling any server."""
    a = cluster.add("a", crash=CrashPoints("create_table.after_commit_point", exit=crash_exit))
    cluster.leader()
    enlist(a.engine)
    with pytest.raises(Crashed):
        a.engine.execute("create_table", create())
    return a


def test_new_leader_is_unavailable_until_pending_ops_complete(cluster):
    a = create_then_crash_at_its_commit_point(cluster)
    cluster.gateway.unreachable.add("s1")  # a live server the new leader cannot reach
    b = cluster.add("b")
    a.kill()
    wait_for(lambda: b.lease.is_serving())
    with pytest.raises(Unavailable):
        b.engine.list_tables()
    assert b.engine.status("b", "b:1").role == "RECOVERING"
    cluster.gateway.unreachable.clear()
    assert cluster.leader() is b
    assert b.catalog.table_by_name("t").state is TableState.RUNNING


def test_silent_server_is_marked_down_and_skipped(cluster):
    a = cluster.add("a", tserver_timeout_s=0.3)
    cluster.leader()
    enlist(a.engine)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(0.05):
            for uuid in ("s0", "s1"):
                a.engine.heartbeat(pb.HeartbeatRequest(server_uuid=uuid, address="x:1"))

    t = threading.Thread(target=beat, name="beat")
    t.start()
    try:
        wait_for(lambda: a.catalog.servers["s2"].state is ServerState.DOWN)
        assert a.catalog.servers["s0"].state is ServerState.LIVE
        assert len(cluster.records("server_down")) == 1
        with pytest.raises(Unavailable, match="s2 DOWN"):  # retried: s2 may come back
            a.engine.execute("create_table", create(rf=3))
        assert a.engine.execute("create_table", create(rf=2)).table_id
    finally:
        stop.set()
        t.join(5)


def test_complete_skips_replicas_on_down_servers(cluster):
    a = create_then_crash_at_its_commit_point(cluster)
    a.engine.execute("server_down", ServerDownRequest("s2", "test"), internal=True)
    a.engine.crash = CrashPoints()
    resp = a.engine.execute("create_table", create())  # the retry completes it
    done = [r for r in cluster.records("create_table") if r.create_table.header.phase == pb.DONE]
    assert len(done) == 1 and len(done[0].create_table.skipped_replicas) == 4
    assert all(uuid != "s2" for uuid, _ in cluster.gateway.replicas)
    assert resp.table_id == done[0].create_table.table_id


def test_a_tombstoned_replica_is_skipped_not_retried_forever(cluster):
    # A replica that is deleted for good (ids are never reused) must not keep an operation,
    # or a new leader's recovery, pending forever.
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    a.engine.execute("create_table", create())
    victim = sorted(cluster.gateway.replicas)[0]
    with cluster.gateway.lock:
        cluster.gateway.replicas.pop(victim)
        cluster.gateway.deleted.add(victim)
    a.engine.execute(
        "alter_table",
        pb.AlterTableRequest(
            request_id=pb.RequestId(client_id="client", seq=2),
            name="t",
            add_columns=[pb.ColumnSchema(name="w", type=pb.INT32, nullable=True)],
        ),
    )
    done = [r for r in cluster.records("alter_table") if r.alter_table.header.phase == pb.DONE]
    assert len(done) == 1
    assert list(done[0].alter_table.skipped_replicas) == [f"{victim[1]}/{victim[0]}"]


def test_a_replica_refused_for_good_is_skipped_and_recovery_goes_on(cluster):
    # A live server that refuses a create (BAD_REQUEST) must not hold the operation, and
    # with it a new leader's recovery, for ever: skipped, recorded in DONE, and served.
    a = create_then_crash_at_its_commit_point(cluster)
    cluster.gateway.refusing.add("s1")
    b = cluster.add("b")
    a.kill()
    assert cluster.leader() is b  # recovered: serving
    assert b.catalog.table_by_name("t").state is TableState.RUNNING
    done = [r for r in cluster.records("create_table") if r.create_table.header.phase == pb.DONE]
    assert len(done) == 1
    skipped = list(done[0].create_table.skipped_replicas)
    assert skipped and all(s.endswith("/s1") for s in skipped), skipped
    assert all(uuid != "s1" for uuid, _ in cluster.gateway.replicas)
    b.engine.execute(  # and it serves requests
        "drop_table", pb.DropTableRequest(request_id=pb.RequestId(client_id="c", seq=9), name="t")
    )


def test_a_full_server_is_skipped_at_once(cluster):
    # A server at its tablet limit (or disk reserve) answers NO_SPACE: asked once, skipped
    # and recorded, not retried until the operation's deadline (the 10,000-table run: the
    # limit answered UNAVAILABLE, and every later create waited out its deadline).
    a = cluster.add("a")
    cluster.leader()
    enlist(a.engine)
    cluster.gateway.full.add("s1")
    before = cluster.gateway.calls
    a.engine.execute("create_table", create(seq=1))
    done = [r for r in cluster.records("create_table") if r.create_table.header.phase == pb.DONE]
    assert len(done) == 1
    skipped = list(done[0].create_table.skipped_replicas)
    assert skipped and all(s.endswith("/s1") for s in skipped), skipped
    calls = cluster.gateway.calls - before
    assert calls == len(done[0].create_table.tablets) * 3, calls  # each replica asked once


# ---------------------------------------------------------------- crash points


def prepare(engine: Engine, kind: str) -> None:
    """State each operation needs before the armed request."""
    enlist(engine)
    if kind in ("drop_table", "alter_table", "set_replication"):
        engine.execute("create_table", create(seq=1))
    if kind == "remove_server":
        engine.execute("server_down", ServerDownRequest("s2", "test"), internal=True)


def request_of(kind: str):
    rid = pb.RequestId(client_id="client", seq=10)
    if kind == "create_table":
        return create(seq=10)
    if kind == "drop_table":
        return pb.DropTableRequest(request_id=rid, name="t")
    if kind == "alter_table":
        return pb.AlterTableRequest(
            request_id=rid,
            name="t",
            new_name="t2",
            add_columns=[pb.ColumnSchema(name="w", type=pb.INT32, nullable=True)],
        )
    if kind == "enlist_server":
        return pb.EnlistServerRequest(server_uuid="s9", address="127.0.0.1:99")
    if kind == "server_down":
        return ServerDownRequest("s1", "test")
    if kind == "remove_server":
        return pb.RemoveServerRequest(request_id=rid, server_uuid="s2")
    if kind == "set_replication":
        return pb.SetReplicationRequest(request_id=rid, name="t", replication_factor=2)
    if kind == "retire_server":
        return pb.RetireServerRequest(request_id=rid, server_uuid="s2")
    if kind == "principal":
        return pb.AddPrincipalRequest(
            request_id=rid, name="alice", public_key=ALICE_KEY, roles=["writer"]
        )
    raise AssertionError(kind)


def check_outcome(cluster: Cluster, node: Node, kind: str, committed: bool, result) -> None:
    """Completed everywhere (catalog and tablet servers agree) with the retry's result."""
    cat = node.catalog
    g = cluster.gateway
    if kind == "create_table":
        table = cat.table_by_name("t")
        assert table.state is TableState.RUNNING and result.table_id == table.table_id
        assert {t for _, t in g.replicas} == set(table.tablet_ids)
        assert len(g.replicas) == 12
    elif kind == "drop_table":
        assert "t" not in cat.names and not cat.tablets
        assert not g.replicas and len(g.deleted) == 12
    elif kind == "alter_table":
        table = cat.table_by_name("t2")
        assert table.state is TableState.RUNNING and table.schema.version == 2
        assert result.schema_version == 2 and "t" not in cat.names
        assert set(g.replicas.values()) == {2} and len(g.replicas) == 12
    elif kind == "enlist_server":
        assert cat.servers["s9"].state is ServerState.LIVE
    elif kind == "server_down":
        assert cat.servers["s1"].state is ServerState.DOWN
    elif kind == "remove_server":
        assert "s2" not in cat.servers
    elif kind == "set_replication":
        assert cat.table_by_name("t").replication_factor == 2
        assert result.table_id == cat.table_by_name("t").table_id
    elif kind == "retire_server":
        assert cat.retired_servers() == {"s2"}
    elif kind == "principal":
        p = cat.principals["alice"]
        assert (p.state, p.roles, p.in_force_active, result.name) == (
            "active",
            ("writer",),
            True,
            "alice",
        )
        assert cat.principal_keys == {ALICE_KEY: "alice"}
    assert not cat.pending
    # Never done twice: one operation record chain for the armed request.
    bodies = [getattr(r, kind) for r in cluster.records(kind)]
    if kind == "enlist_server":
        armed = [b for b in bodies if b.server_uuid == "s9"]
    elif kind == "server_down":
        armed = [b for b in bodies if b.server_uuid == "s1"]
    else:
        armed = [b for b in bodies if b.header.request_id.seq == 10]
    assert len({b.header.op_id for b in armed}) <= 1, armed


POINTS = sorted(ALL_POINTS) + ["create_table.after_create_tablet:5"]
ALICE_KEY = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"  # a CURVE public key, Z85


@pytest.mark.parametrize("point", POINTS)
def test_crash_point_then_takeover_completes_or_leaves_no_trace(cluster, point):
    kind = point.split(".")[0]
    a = cluster.add("a")
    cluster.leader()
    prepare(a.engine, kind)
    a.engine.crash = CrashPoints(*_parse(point), exit=crash_exit)
    before = cluster.store.last_id(LOG_NAME)
    with pytest.raises(Crashed):
        a.engine.execute(kind, request_of(kind), internal=kind == "server_down")
    committed = not point.endswith("before_commit_point")
    b = cluster.add("b")
    a.kill()
    assert cluster.leader() is b
    if not committed:
        # No trace: nothing but lease records after the crash.
        kinds = {
            decode(e.data).WhichOneof("record")
            for e in cluster.store.read(LOG_NAME, before + 1, 1000)
        }
        assert kinds <= {"lease"}
    # The client retries against the new leader (the tablet server re-enlists).
    result = b.engine.execute(kind, request_of(kind), internal=kind == "server_down")
    check_outcome(cluster, b, kind, committed, result)


def _parse(point: str) -> tuple[str, int]:
    name, _, n = point.partition(":")
    return name, int(n or 1)


def test_crash_point_names():
    assert points_of("create_table") == (
        "create_table.before_commit_point",
        "create_table.after_commit_point",
        "create_table.before_create_tablet",
        "create_table.after_create_tablet",
        "create_table.before_done",
        "create_table.after_done",
    )
    assert points_of("principal") == (  # two phases, no tablet-server call
        "principal.before_commit_point",
        "principal.after_commit_point",
        "principal.before_done",
        "principal.after_done",
    )
    assert len(ALL_POINTS) == 3 * 6 + 5 * 2 + 4
