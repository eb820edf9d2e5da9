"""Process harness for coordinator integration tests: coordinator groups and tablet servers
as real processes on 127.0.0.1 free ports. Tablet servers heartbeat by themselves when given
the coordinators' addresses; `Heartbeater` does it on their behalf for tests that must start
the tablet servers before the coordinator group's ports are known."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from logcentric.meta import CoordinatorClient
from rpc.addresses import free_port  # below the ephemeral range: no bind races
from rpc.client import RpcClient
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

ROOT = Path(__file__).resolve().parents[2]


def wait_for(cond: Callable[[], object], timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"{what} not met within {timeout_s} s")


class Proc:
    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.args = args
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env["PYTHONUNBUFFERED"] = "1"
        self._out = open(log, "ab")
        self.p = subprocess.Popen(
            [sys.executable, *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=ROOT,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.p.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.p.send_signal(signal.SIGCONT)
            self.p.kill()
        self.p.wait(10)
        self._out.close()

    def stop(self) -> None:
        if self.alive():
            self.p.send_signal(signal.SIGCONT)
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self._out.close()


class CoordinatorGroup:
    """N coordinator nodes with an embedded logstore and a cluster password."""

    def __init__(self, root: Path, n: int = 3) -> None:
        self.root = root
        self.password_file = root / "password"
        self.password_file.write_text("test-cluster-password\n")
        self.raft = [f"127.0.0.1:{free_port()}" for _ in range(n)]
        self.rpc = [f"127.0.0.1:{free_port()}" for _ in range(n)]
        self.procs: list[Proc | None] = [None] * n

    def start(
        self,
        i: int,
        env: dict[str, str] | None = None,
        lease_timeout_s: float = 1.0,
        extra: tuple[str, ...] = (),
    ) -> Proc:
        peers = ",".join(a for j, a in enumerate(self.raft) if j != i)
        args = [
            "-m", "optools.coordinator_cli", "start",
            "--id", f"c{i}",
            "--data-dir", str(self.root / f"c{i}"),
            "--bind", self.rpc[i],
            "--raft", self.raft[i],
            "--peers", peers,
            "--password-file", str(self.password_file),
            "--lease-timeout-s", str(lease_timeout_s),
            *extra,
        ]  # fmt: skip
        proc = Proc(args, self.root / f"c{i}.log", env)
        self.procs[i] = proc
        return proc

    def wait_started(self, timeout_s: float = 60.0) -> None:
        """Every started node has bound its ports (so that no other process takes them)."""
        for i, p in enumerate(self.procs):
            if p is not None:
                wait_for(lambda p=p: " rpc=" in p.text(), timeout_s, f"coordinator c{i} start")

    def client(self, **kw) -> CoordinatorClient:
        return CoordinatorClient(self.rpc, **kw)

    def leader_index(self, client: CoordinatorClient, timeout_s: float = 30.0) -> int:
        def find():
            for i, address in enumerate(self.rpc):
                p = self.procs[i]
                if p is None or not p.alive():
                    continue
                try:
                    if client.status(address, timeout_s=0.5).role == "LEADER":
                        return i + 1
                except RpcError:
                    pass
            return 0

        return wait_for(find, timeout_s, "a serving leader") - 1

    def close(self) -> None:
        for p in self.procs:
            if p is not None:
                p.kill()


class TServer:
    """A tablet server process; with `coordinators` it enlists and heartbeats by itself."""

    def __init__(self, root: Path, name: str, coordinators: list[str] | None = None) -> None:
        fs = root / name
        subprocess.run(
            [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(fs)],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        args = ["-m", "tservers.cli", "start", "--fs-root", str(fs), "--bind", "127.0.0.1:0"]
        if coordinators:
            args += ["--coordinators", ",".join(coordinators)]
        self.proc = Proc(args, root / f"{name}.log")

        def serving() -> str | None:
            line = next((ln for ln in self.proc.text().splitlines() if " serving on " in ln), None)
            if line is None and not self.proc.alive():
                raise AssertionError(f"tablet server {name} exited:\n{self.proc.text()[-3000:]}")
            return line

        line = wait_for(serving, 60, f"tablet server {name} start")
        parts = line.split()
        self.uuid = parts[parts.index("tserver") + 1]
        self.address = parts[-1]

    def tablets(self) -> dict[str, int]:
        """tablet id -> data state (tservers.DataState) as the server reports it."""
        with RpcClient(self.address, "test") as c:
            resp = c.call(
                self.uuid, "TServer.ListTablets", ts.ListTabletsRequest(), ts.ListTabletsResponse
            )
        return {t.tablet_id: t.data_state for t in resp.tablets}

    def schema_versions(self) -> dict[str, int]:
        """tablet id -> schema version of the live tablets."""
        with RpcClient(self.address, "test") as c:
            resp = c.call(
                self.uuid, "TServer.ListTablets", ts.ListTabletsRequest(), ts.ListTabletsResponse
            )
        return {t.tablet_id: t.schema_version for t in resp.tablets if t.data_state == ts.READY}

    def live_tablets(self) -> set[str]:
        return {t for t, state in self.tablets().items() if state == ts.READY}

    def close(self) -> None:
        self.proc.stop()


class Heartbeater:
    """Heartbeats to every coordinator node for each tablet server; enlists when asked."""

    def __init__(self, group: CoordinatorGroup, servers: list[TServer], period_s: float = 0.2):
        self.client = group.client(timeout_s=5.0, call_timeout_s=1.0)
        self.servers = servers
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeater", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            for s in self.servers:
                request = pb.HeartbeatRequest(server_uuid=s.uuid, address=s.address)
                try:
                    if self.client.heartbeat_all(request, timeout_s=0.5):
                        self.client.enlist_server(s.uuid, s.address)
                except RpcError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()
