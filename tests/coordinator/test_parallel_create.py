"""CreateTable creates its replicas in parallel (issue 28.3): against a real tablet server,
the number of CreateTablet calls in flight at once there (counted by the server's handler)
reaches every replica of the table, and the retry and skip rules hold (a replica on a DOWN
server is skipped and recorded in DONE)."""

from __future__ import annotations

import threading

import pytest

from coordinator.catalog import Catalog
from coordinator.gateway import RpcTabletServerGateway
from coordinator.ops import apply_record, create_table, enlist_server, server_down
from coordinator.ops.common import CompletionContext
from coordinator.ops.server_down import ServerDownRequest
from logstore.memory import MemoryLogStore
from rpc.protocols import coordinator_pb2 as pb
from tservers.fs import FsLayout
from tservers.server import TabletServer, TServerConfig
from tservers.service import TServerService

pytestmark = pytest.mark.integration

LOG = "coordinator"
TABLETS = 6
# How long the first calls wait at the server for the others. Only a bound: with calls in
# parallel they are all there at once; one after another, each waits this long alone.
HOLD_S = 10.0
SCHEMA = pb.Schema(
    columns=[
        pb.ColumnSchema(name="id", type=pb.INT64, is_key=True),
        pb.ColumnSchema(name="v", type=pb.STRING, nullable=True),
    ]
)


class _Log:
    """A memory log and a catalog kept current: commit = append + apply, as the leader."""

    def __init__(self) -> None:
        self.store = MemoryLogStore()
        self.catalog = Catalog()
        self.seq = 0

    def next_id(self) -> int:
        return self.store.last_id(LOG) + 1

    def commit(self, record: pb.LogRecord, invalidates=()) -> int:
        entry_id = self.store.append(
            LOG, record.SerializeToString(), expected_id=self.next_id(), invalidates=invalidates
        )
        apply_record(self.catalog, entry_id, record)
        return entry_id

    def run(self, module, request) -> pb.LogRecord:
        record = module.decide(self.catalog, request, self.next_id())
        self.commit(record, module.invalidates_at_commit(record))
        return record

    def rid(self) -> pb.RequestId:
        self.seq += 1
        return pb.RequestId(client_id="c1", seq=self.seq)


class _InFlight:
    """The server's count of CreateTablet calls running, and the most seen at once."""

    def __init__(self, target: int) -> None:
        self.cond = threading.Condition()
        self.now = 0
        self.most = 0
        self.target = target

    def wrap(self, real):
        def create_tablet(service, req, ctx):
            with self.cond:
                self.now += 1
                self.most = max(self.most, self.now)
                self.cond.notify_all()
                self.cond.wait_for(lambda: self.now >= self.target, HOLD_S)
            try:
                return real(service, req, ctx)
            finally:
                with self.cond:
                    self.now -= 1

        return create_tablet


@pytest.fixture
def tserver(tmp_path, monkeypatch):
    counter = _InFlight(TABLETS)
    monkeypatch.setattr(TServerService, "create_tablet", counter.wrap(TServerService.create_tablet))
    FsLayout.format(tmp_path / "ts")
    server = TabletServer(TServerConfig(fs_root=tmp_path / "ts", workers=TABLETS + 2)).start()
    try:
        yield server, counter
    finally:
        server.close()


def test_replicas_are_created_in_parallel_and_down_servers_skipped(tserver):
    server, counter = tserver
    log = _Log()
    log.run(enlist_server, pb.EnlistServerRequest(server_uuid=server.uuid, address=server.address))
    log.run(enlist_server, pb.EnlistServerRequest(server_uuid="ghost", address="127.0.0.1:1"))
    request = pb.CreateTableRequest(
        request_id=log.rid(), name="t", schema=SCHEMA, num_tablets=TABLETS, replication_factor=1
    )
    started = create_table.decide(log.catalog, request, log.next_id())
    log.commit(started)
    on_ghost = [t.tablet_id for t in started.create_table.tablets if t.replica_uuids[0] == "ghost"]
    assert on_ghost and len(on_ghost) < TABLETS  # placement spreads them over both
    log.run(server_down, ServerDownRequest("ghost", "test"))
    on_server = TABLETS - len(on_ghost)
    counter.target = on_server

    gateway = RpcTabletServerGateway("coordinator-test")
    try:
        ctx = CompletionContext(
            catalog=log.catalog,
            gateway=gateway,
            commit=log.commit,
            crash=lambda name: None,
            call_timeout_s=4 * HOLD_S,
        )
        done = create_table.complete(ctx, started)
    finally:
        gateway.close()
    # Every replica on the live server was in flight there at the same time.
    assert counter.most == on_server, counter.most
    assert sorted(done.create_table.skipped_replicas) == sorted(f"{t}/ghost" for t in on_ghost)
    assert set(server.fs.tablet_ids()) >= {
        t.tablet_id for t in started.create_table.tablets if t.tablet_id not in on_ghost
    }
    table = log.catalog.tables[started.create_table.table_id]
    assert table.state.name == "RUNNING"
