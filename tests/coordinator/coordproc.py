"""Process harness for coordinator integration tests: coordinator groups and tablet servers
as real processes on 127.0.0.1 free ports.

Secure by default, as the daemons are (design/security.md sections 2-5): a group makes each
node's CURVE key pair in `<data-dir>/keys/` before its first start (as `coordinator show-key`
would), an admin key pair and `<root>/admin.credentials` listing every node's address and
key, and starts the nodes with `--curve --admin-public-key`; `client()` calls as that admin.
A tablet server is formatted (it makes its key pair), started with `--curve
--coordinator-keys`, and admitted by the admin (`CoordinatorGroup.admit`: a `tserver`
principal named by its UUID with its key and the `server` role). Its own key (the `server`
role, which it always admits) asks it for its tablets. `insecure=True` runs plaintext, for
the tests whose point is plaintext behaviour.

`Heartbeater` heartbeats on behalf of tablet servers, each with that server's own key (a
CURVE node answers a heartbeat only from the key admitted for the UUID it names)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from logcentric.meta import CoordinatorClient
from rpc import credentials, errors, keys
from rpc.addresses import free_port  # below the ephemeral range: no bind races
from rpc.client import RpcClient
from rpc.credentials import Credentials
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb
from rpc.protocols import tserver_pb2 as ts

ROOT = Path(__file__).resolve().parents[2]
COORDINATOR_KEYS_DIR = "keys"  # coordinator.node.KEYS_DIR / KEY_NAME, as `show-key` makes them
COORDINATOR_KEY_NAME = "coordinator"
TSERVER_KEY_NAME = "tserver"  # tservers/fs.py: <fs-root>/keys/tserver.key{,_secret}
ADMIT_TIMEOUT_S = 90.0


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
    """N coordinator nodes with an embedded logstore and a cluster password; CURVE with a
    bootstrap admin unless `insecure`."""

    def __init__(self, root: Path, n: int = 3, insecure: bool = False) -> None:
        self.root = root
        self.insecure = insecure
        self.password_file = root / "password"
        self.password_file.write_text("test-cluster-password\n")
        self.raft = [f"127.0.0.1:{free_port()}" for _ in range(n)]
        self.rpc = [f"127.0.0.1:{free_port()}" for _ in range(n)]
        self.procs: list[Proc | None] = [None] * n
        self.node_keys: list[str] = []  # each node's public key (secure)
        self.admin_public_key_file = root / "admin.key"
        self.admin_credentials_file = root / "admin.credentials"
        self.credentials: Credentials | None = None
        if not insecure:
            for i in range(n):
                pair = keys.create_keypair(
                    root / f"c{i}" / COORDINATOR_KEYS_DIR, COORDINATOR_KEY_NAME
                )
                self.node_keys.append(pair.public)
            admin = keys.KeyPair.generate()
            self.admin_public_key_file.write_text(admin.public + "\n")
            credentials.write(
                self.admin_credentials_file,
                credentials.document(
                    "admin",
                    "user",
                    ["admin"],
                    admin,
                    list(zip(self.rpc, self.node_keys, strict=True)),
                ),
            )
            self.credentials = credentials.load(self.admin_credentials_file)

    def node_keypair(self, i: int) -> keys.KeyPair:
        """Node i's key pair (secure), to call tablet servers as that node would."""
        return keys.load_keypair(self.root / f"c{i}" / COORDINATOR_KEYS_DIR, COORDINATOR_KEY_NAME)

    def security_args(self) -> list[str]:
        if self.insecure:
            return ["--insecure"]
        return ["--curve", "--admin-public-key", str(self.admin_public_key_file)]

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
            *self.security_args(),
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
        """A client of the group: as the admin (secure), else plaintext."""
        return CoordinatorClient(self.rpc, credentials=self.credentials, **kw)

    def wait_admin(self, timeout_s: float = ADMIT_TIMEOUT_S) -> None:
        """Secure: every running node admits the admin (the bootstrap admin is logged and
        each node has applied it: until then a node refuses the key at the handshake).
        Insecure: a node leads."""
        with self.client(timeout_s=5.0) as client:
            self.leader_index(client, timeout_s)
            if self.insecure:
                return

            def every_node() -> bool:
                for i, address in enumerate(self.rpc):
                    p = self.procs[i]
                    if p is None or not p.alive():
                        continue
                    try:
                        client.status(address, timeout_s=1.0)
                    except RpcError:
                        return False
                return True

            wait_for(every_node, timeout_s, "every node admits the admin")

    def admit(self, servers: Sequence[TServer], timeout_s: float = ADMIT_TIMEOUT_S) -> None:
        """Admit each tablet server (`admit_key`); nothing to do when insecure."""
        for s in servers:
            self.admit_key(s.uuid, s.keypair.public, timeout_s)

    def admit_key(self, uuid: str, public_key: str, timeout_s: float = ADMIT_TIMEOUT_S) -> None:
        """Log a `tserver` principal (the UUID, its key, the server role), as the admin (as
        `local-cluster up` does). Nothing to do when insecure."""
        if self.insecure:
            return
        self.add_principal(uuid, "tserver", public_key, ["server"], timeout_s)

    def add_principal(
        self,
        name: str,
        kind: str,
        public_key: str,
        roles: list[str],
        timeout_s: float = ADMIT_TIMEOUT_S,
    ) -> None:
        """Log a principal as the admin, retried with the same request id until the
        bootstrap admin is logged and a leader serves."""
        deadline = time.monotonic() + timeout_s
        with self.client(timeout_s=5.0, call_timeout_s=5.0) as client:
            request = pb.AddPrincipalRequest(
                request_id=client.next_request_id(),
                name=name,
                kind=kind,
                public_key=public_key,
                roles=roles,
            )
            while True:
                try:
                    client.call("AddPrincipal", request, pb.AddPrincipalResponse, 5.0)
                    return
                except errors.AlreadyExists:
                    return  # a retry of ours whose first answer was lost
                except RpcError as err:
                    if time.monotonic() >= deadline:
                        raise AssertionError(
                            f"could not add {kind} {name} within {timeout_s} s: {err}"
                        ) from None
                    time.sleep(0.2)

    def server_client(self, uuid: str, keypair: keys.KeyPair, **kw) -> CoordinatorClient:
        """A client speaking for tablet server `uuid` (heartbeats, enlisting): with that
        server's key pair when secure (a node answers those calls only from the key admitted
        for the UUID they name), plaintext otherwise."""
        creds = None
        if self.credentials is not None:
            creds = Credentials(
                uuid, "tserver", ("server",), keypair, self.credentials.coordinators
            )
        return CoordinatorClient(self.rpc, credentials=creds, **kw)

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
    """A tablet server process: it enlists and heartbeats by itself to the `group`'s nodes
    (which need not run), with CURVE unless the group is insecure (admit it: `group.admit`);
    it admits the group's node keys and its own. Without a group it runs alone, plaintext:
    `insecure` must say so (a CURVE server without coordinators would admit nobody)."""

    def __init__(
        self,
        root: Path,
        name: str,
        group: CoordinatorGroup | None = None,
        *,
        insecure: bool = False,
    ) -> None:
        fs = root / name
        subprocess.run(
            [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(fs)],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        self.fs_root = fs
        self.keypair = keys.load_keypair(fs / "keys", TSERVER_KEY_NAME)
        self.insecure = insecure or (group is not None and group.insecure)
        assert group is not None or self.insecure, "a tablet server alone runs with --insecure"
        args = ["-m", "tservers.cli", "start", "--fs-root", str(fs), "--bind", "127.0.0.1:0"]
        if group is not None:
            args += ["--coordinators", ",".join(group.rpc)]
        if self.insecure:
            args += ["--insecure"]
        else:  # one key per address of --coordinators, in order; `=`: a key may start with -
            args += ["--curve", "--coordinator-keys=" + ",".join(group.node_keys)]
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

    def curve(self) -> keys.ClientCurve | None:
        """CURVE client settings with this server's own key (the `server` role, which it
        always admits, before any principals table arrives); None when insecure."""
        if self.insecure:
            return None
        return keys.ClientCurve(self.keypair, {self.uuid: self.keypair.public})

    def rpc_client(self) -> RpcClient:
        """A client of this server (see `curve`)."""
        curve = self.curve()
        key = self.keypair.public if curve is not None else ""
        return RpcClient(self.address, "test", curve=curve, server_key=key)

    def _list(self) -> ts.ListTabletsResponse:
        with self.rpc_client() as c:
            return c.call(
                self.uuid, "TServer.ListTablets", ts.ListTabletsRequest(), ts.ListTabletsResponse
            )

    def tablets(self) -> dict[str, int]:
        """tablet id -> data state (tservers.DataState) as the server reports it."""
        return {t.tablet_id: t.data_state for t in self._list().tablets}

    def schema_versions(self) -> dict[str, int]:
        """tablet id -> schema version of the live tablets."""
        resp = self._list()
        return {t.tablet_id: t.schema_version for t in resp.tablets if t.data_state == ts.READY}

    def live_tablets(self) -> set[str]:
        return {t for t, state in self.tablets().items() if state == ts.READY}

    def close(self) -> None:
        self.proc.stop()


class Heartbeater:
    """Heartbeats to every coordinator node for each tablet server; enlists when asked. With
    CURVE each server's heartbeats go with its own key (the node checks that the key is the
    one admitted for the UUID the heartbeat names)."""

    def __init__(self, group: CoordinatorGroup, servers: list[TServer], period_s: float = 0.2):
        self.clients = [
            group.server_client(s.uuid, s.keypair, timeout_s=5.0, call_timeout_s=1.0)
            for s in servers
        ]
        self.servers = servers
        self.period_s = period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeater", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            for s, client in zip(self.servers, self.clients, strict=True):
                request = pb.HeartbeatRequest(server_uuid=s.uuid, address=s.address)
                try:
                    if client.heartbeat_all(request, timeout_s=0.5):
                        client.enlist_server(s.uuid, s.address)
                except RpcError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for client in self.clients:
            client.close()
