"""Power loss of real nodes: kill -9 of a node's processes, then the loss of its unsynced data.

Every node keeps its data dir on its own lazyfs mount (tests/nemesis/lazyfs.py): the
durable state under `<root>/disks/<node>/data`, the mount at `<root>/mnt/<node>`, which is
the node's data dir. A power loss of a node kills its process with SIGKILL (so nothing more
reaches the file system from it), then drops whatever the mount holds that was not fsynced,
optionally tearing its last unsynced write at a sector; `restart` starts it again on what
survived. `power_loss_all` does the same to every node at once: the processes first, then
the disks, as when the power of a whole rack goes.

`PowerCluster` is a LocalCluster (optools/localcluster.py: coordinators with their embedded
logstore, tablet servers) whose nodes live on such mounts; secure (CURVE, the admin's
credentials in `<root>/admin.credentials`) when built with `secure=True`, as the tests do:
every node's key pair is then on its mount, where a power loss must not take it.
`PowerLogGroup` is a `logstore serve` replica group (tests/logstore/procs.py) on such
mounts. Both are context managers that always stop their processes and unmount.
"""

from __future__ import annotations

import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path

from logstore.remote import RemoteLogStore
from optools.localcluster import ClusterSpec, LocalCluster, NodeSpec
from optools.localcluster import _make_secure as make_secure_keys
from rpc.addresses import free_port
from rpc.keys import KeyPair
from tests.logstore.procs import ReplicaProcess, client_options
from tests.nemesis.lazyfs import LazyFS

log = logging.getLogger("nemesis.power")

NODES_MAX = 9


class Disks:
    """One lazyfs mount per node name, under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.mounts: dict[str, LazyFS] = {}

    def mount(self, name: str) -> Path:
        assert name not in self.mounts and len(self.mounts) < NODES_MAX, name
        fs = LazyFS(self.root / "disks" / name, self.root / "mnt" / name)
        self.mounts[name] = fs
        fs.start()
        return fs.mount

    def power_loss(self, name: str, torn: bool = False) -> dict:
        """Drop what the node's disk holds unsynced. AssertionError when that took a public
        key the node had (`keys/*.key`: made, so meant to be durable): the node would come
        back as another identity, which no one admitted."""
        keys_before = self._public_keys(name)
        answer = self.mounts[name].power_loss(torn=torn)
        log.info("power loss of %s: %s", name, answer)
        keys_after = self._public_keys(name)
        assert keys_after == keys_before, (
            f"the power loss of {name} lost key files: {keys_before} before, {keys_after} after"
        )
        return answer

    def _public_keys(self, name: str) -> dict[str, str]:
        keys_dir = self.mounts[name].mount / "keys"
        return {p.name: p.read_text() for p in sorted(keys_dir.glob("*.key"))}

    def close(self) -> None:
        for fs in self.mounts.values():
            fs.close()
        self.mounts.clear()


class PowerCluster(LocalCluster):
    """A local cluster whose every node's data dir is its own lazyfs mount."""

    def __init__(
        self,
        root: Path,
        coordinators: int = 3,
        tservers: int = 3,
        *,
        tserver_args: tuple[str, ...] = (),
        lease_timeout_s: float = 1.5,
        secure: bool,
    ) -> None:
        root = Path(root).resolve()
        root.mkdir(parents=True, exist_ok=True)
        assert 1 <= coordinators and 0 <= tservers and coordinators + tservers <= NODES_MAX
        self.disks = Disks(root)
        self.tserver_args = list(tserver_args)
        # Extra environment of a node's next start (crash points), by node name.
        self.node_env: dict[str, dict[str, str]] = {}
        spec = ClusterSpec(root=str(root), lease_timeout_s=lease_timeout_s, secure=secure)
        super().__init__(spec)
        try:
            for i in range(coordinators):
                name = f"coordinator-{i}"
                spec.coordinators.append(
                    NodeSpec(
                        name=name,
                        rpc=f"127.0.0.1:{free_port()}",
                        raft=f"127.0.0.1:{free_port()}",
                        data=str(self.disks.mount(name)),
                    )
                )
            for i in range(tservers):
                name = f"tserver-{i}"
                spec.tservers.append(
                    NodeSpec(
                        name=name, rpc=f"127.0.0.1:{free_port()}", data=str(self.disks.mount(name))
                    )
                )
            spec.password_file.write_text(secrets.token_hex(24) + "\n")
            spec.password_file.chmod(0o600)
            if secure:  # the coordinators' pairs on their mounts (fsynced), the admin's
                make_secure_keys(spec)
        except BaseException:
            self.disks.close()
            raise
        spec.save()

    def _spawn(self, node: NodeSpec, args: list[str]) -> None:
        if args[:2] == ["tservers.cli", "start"]:
            args = [*args, *self.tserver_args]
        env = self.node_env.get(node.name, {})
        # LocalCluster passes this process's environment on; no other thread reads it.
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            super()._spawn(node, args)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def admit_all(self, timeout_s: float) -> None:
        """A secure cluster started node by node (not by `up`): format every tablet server
        not formatted yet (as `start_tserver` does; one started later is admitted now too)
        and admit them all as the admin. Needs a coordinator leader."""
        for node in self.spec.tservers:
            if not (Path(node.data) / "instance").exists():
                subprocess.run(
                    [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", node.data],
                    check=True,
                    capture_output=True,
                )
        if self.spec.secure:
            self.admit_tservers(timeout_s)

    def nodes(self) -> list[NodeSpec]:
        return [*self.spec.coordinators, *self.spec.tservers]

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes() if n.name == name)

    def power_loss(self, node: NodeSpec, torn: bool = False) -> dict:
        """kill -9 of the node's process, then the loss of its unsynced data."""
        self.kill(node)
        assert not self.is_up(node), node.name
        node.pid = 0  # down on purpose: wait_ready looks only at nodes with a process
        return self.disks.power_loss(node.name, torn=torn)

    def power_loss_all(self, torn: bool = False) -> None:
        """Every node at once: every process dies before any disk loses its cache."""
        for node in self.nodes():
            self.kill(node)
        for node in self.nodes():
            assert not self.is_up(node), node.name
            node.pid = 0
            self.disks.power_loss(node.name, torn=torn)

    def restart(self, node: NodeSpec, env: dict[str, str] | None = None) -> None:
        """Start the node again (with `env` added to its environment for this start)."""
        self.node_env[node.name] = dict(env or {})
        if node in self.spec.coordinators:
            self.start_coordinator(self.spec.coordinators.index(node))
        else:
            self.start_tserver(self.spec.tservers.index(node))

    def close(self) -> None:
        try:
            for node in self.nodes():
                self.kill(node)
            self.stop_started()
        finally:
            self.disks.close()

    def __enter__(self) -> PowerCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PowerLogGroup:
    """`logstore serve` replicas, each with its data dir on its own lazyfs mount. Secure
    (CURVE, `secure=True`, as the tests build it): each replica's key pair is on its mount,
    the group admits one caller key (both roles) that `remote()` calls with."""

    def __init__(
        self,
        root: Path,
        addresses: list[str],
        extra_args: list[str],
        env: dict[str, str],
        *,
        secure: bool,
    ) -> None:
        """`addresses`: 2n free addresses (n Raft, then n rpc)."""
        n = len(addresses) // 2
        assert 1 <= n <= NODES_MAX and len(addresses) == 2 * n
        self.disks = Disks(Path(root))
        raft, rpc = addresses[:n], addresses[n:]
        caller = KeyPair.generate() if secure else None
        self.replicas: list[ReplicaProcess] = []
        try:
            for i in range(n):
                mount = self.disks.mount(f"replica{i}")
                replica = ReplicaProcess(
                    raft[i], rpc[i], str(mount), raft, list(extra_args),
                    secure=secure, caller=caller,
                )  # fmt: skip
                # `env` execs the replica: the environment of this replica only, same pid.
                replica.argv_prefix = [
                    "env",
                    *(f"{k}={v}" for k, v in sorted(env.items())),
                    *replica.argv_prefix,
                ]
                self.replicas.append(replica)
        except BaseException:
            self.disks.close()
            raise

    @property
    def rpc_addresses(self) -> list[str]:
        return [r.rpc_address for r in self.replicas]

    def start(self, i: int) -> None:
        """Start replica i; RuntimeError when it does not start, or (secure) comes back with
        another key than its first start's: its key pair was lost (a power loss after it
        was made), so no caller would reach it."""
        replica = self.replicas[i]
        before = replica.public_key
        replica.start(timeout_s=60.0)
        if before and replica.public_key != before:
            raise RuntimeError(
                f"replica{i} came back with another key ({replica.public_key}, was {before})"
            )

    def remote(self) -> RemoteLogStore:
        """A client of the started group (CURVE with the caller key when secure)."""
        return RemoteLogStore(self.rpc_addresses, **client_options(self.replicas))

    def power_loss(self, i: int, torn: bool = False) -> dict:
        self.replicas[i].kill()
        return self.disks.power_loss(f"replica{i}", torn=torn)

    def power_loss_all(self, torn: bool = False) -> None:
        for r in self.replicas:
            r.kill()
        for i in range(len(self.replicas)):
            self.disks.power_loss(f"replica{i}", torn=torn)

    def snapshots(self) -> int:
        """Replicas whose durable store holds a snapshot."""
        return sum((fs.data_dir / "snapshot").exists() for fs in self.disks.mounts.values())

    def close(self) -> None:
        try:
            for r in self.replicas:
                r.kill()
        finally:
            self.disks.close()

    def __enter__(self) -> PowerLogGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
