"""Helpers of the replication tests: a trio of tablet servers, a replicated tablet, leaders.

Servers keep their address across restarts (peers find each other through the addresses in
the tablet's config), so a restarted server reuses its port.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa

from logcentric.tablets import TabletServerClient, column
from rpc import errors
from rpc.client import RpcClient
from rpc.protocols.tserver_pb2 import (
    CreateTabletRequest,
    CreateTabletResponse,
    MemberType,
    OpType,
    RaftConfigPB,
    SchemaPB,
    TabletReportPB,
)
from tests.support.procs import wait_for
from tests.tservers.procs import TServerProcess
from tservers.fs import FsLayout

COLS = [
    column("id", "int64", key=True),
    column("v", "string", nullable=True),
]


def rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


class TServerTrio:
    """Three tablet servers, each with its own fs root; kill -9 and restart on one address."""

    def __init__(self, tmp_path: Path, n: int = 3, extra_args=()) -> None:
        self.roots = [tmp_path / f"ts{i}" for i in range(n)]
        self.extra_args = list(extra_args)
        self.procs: list[TServerProcess] = []
        self._clients: dict[int, TabletServerClient] = {}
        self._lock = threading.Lock()  # client threads share the clients

    def start_all(self) -> None:
        for root in self.roots:
            FsLayout.format(root)
            self.procs.append(TServerProcess(root, extra_args=self.extra_args).start())

    def stop_all(self) -> None:
        for c in self._clients.values():
            c.close()
        self._clients.clear()
        for p in self.procs:
            p.stop()

    def kill9(self, i: int) -> None:
        self._drop_client(i)
        self.procs[i].kill9()

    def restart(self, i: int, env: dict[str, str] | None = None) -> None:
        self._drop_client(i)
        old = self.procs[i]
        old.stop()
        p = TServerProcess(old.root, extra_args=self.extra_args, env=env)
        p.port, p.address = old.port, old.address
        self.procs[i] = p.start()

    def _drop_client(self, i: int) -> None:
        with self._lock:
            c = self._clients.pop(i, None)
        if c is not None:
            c.close()

    def client(self, i: int) -> TabletServerClient:
        with self._lock:
            c = self._clients.get(i)
            if c is None:
                p = self.procs[i]
                c = TabletServerClient(p.address, p.uuid, timeout_s=10.0)
                self._clients[i] = c
            return c

    def alive(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.proc is not None and p.proc.poll() is None]

    def create_tablet(self, tablet_id: str, members: list[int] | None = None) -> None:
        members = list(range(len(self.procs))) if members is None else members
        config = RaftConfigPB(opid_index=-1)
        for i in members:
            p = self.procs[i]
            config.peers.add(uuid=p.uuid, address=p.address, member_type=MemberType.VOTER)
        for i in members:
            p = self.procs[i]
            with RpcClient(p.address, "test") as rc:
                rc.call(
                    p.uuid,
                    "TServer.CreateTablet",
                    CreateTabletRequest(
                        tablet_id=tablet_id,
                        table_name="tbl",
                        schema=SchemaPB(columns=COLS),
                        config=config,
                    ),
                    CreateTabletResponse,
                    timeout_s=30.0,
                )

    def report(self, i: int, tablet_id: str) -> TabletReportPB | None:
        try:
            for r in self.client(i).list_tablets().tablets:
                if r.tablet_id == tablet_id:
                    return r
        except errors.RpcError:
            return None
        return None

    def leader(self, tablet_id: str, timeout_s: float = 30.0, among=None) -> int:
        """Index of the server that leads the tablet (highest term among live servers)."""

        def find():
            best = None
            for i in among if among is not None else self.alive():
                r = self.report(i, tablet_id)
                if r is not None and r.role == "LEADER":
                    if best is None or r.current_term > best[1]:
                        best = (i, r.current_term)
            return best

        return wait_for(find, timeout_s, f"a leader of {tablet_id}", interval_s=0.05)[0]

    def write(self, i: int, tablet_id: str, ids, op: int = OpType.INSERT):
        return self.client(i).write(tablet_id, [(op, rows(ids))], schema_version=1)

    def write_anywhere(self, tablet_id: str, ids, deadline_s: float = 30.0):
        """Write at whoever leads, following NOT_LEADER; raises the last error at the end."""
        deadline = time.monotonic() + deadline_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            for i in self.alive():
                try:
                    return self.write(i, tablet_id, ids)
                except (
                    errors.NotLeader,
                    errors.Unavailable,
                    errors.TimedOut,
                    errors.TabletNotFound,
                    errors.TabletDeleted,
                ) as e:  # not a replica (any more), or not the leader
                    last = e
            time.sleep(0.05)
        raise AssertionError(f"no leader took the write before the deadline: {last}")

    def scan_ids(self, i: int, tablet_id: str) -> list[int]:
        t = self.client(i).scan_table(tablet_id)
        return sorted(t.column("id").to_pylist()) if t.num_columns else []
