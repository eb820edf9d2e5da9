"""A cluster of real processes, each in its own network namespace, so that links can be cut.

Every node (3 coordinators, 3 tablet servers) runs in namespace `lcnem-<name>` with one veth
pair to the bridge `lcnem-br` in the root namespace; node i has 10.77.0.<i+1>/24 and the
bridge 10.77.0.254, so the test process (root namespace) reaches every node and the nodes
reach each other only through the bridge, where `net.py` cuts links with iptables rules
inside the namespaces. Processes are started as LocalCluster starts them (password file,
arguments), prefixed with `ip netns exec`.

Secure (`build(..., secure=True)`, as every nemesis test builds it): as `local-cluster up
--secure` (design/security.md section 5), every coordinator node's key pair is made in its
data dir before its first start (on its lazyfs mount when the disks are lazy: after the
mount), the admin's credentials in `<root>/admin.credentials` name each coordinator by its
namespace address (10.77.0.i:7100, the address every client in the root namespace uses),
the nodes run with CURVE, and `up` admits the tablet servers as the admin (from the root
namespace, through the bridge) before waiting for readiness.

Namespaces are global to the machine: one run at a time holds `LOCK_PATH`; `clean_leftovers`
removes what a crashed run left, and `NemesisCluster.close` always removes what it made.
Needs root and `ip`; iptables comes from scripts/ensure_nemesis.sh.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from optools.localcluster import ClusterSpec, LocalCluster, NodeSpec
from optools.localcluster import _make_secure as make_secure_keys
from rpc.console import deferred_interrupts
from tests.nemesis.faults import LEADER, TABLET_LEADER_OF

logger = logging.getLogger("nemesis.cluster")

NS_PREFIX = "lcnem-"
BRIDGE = "lcnem-br"
VETH_PREFIX = "lcnv"  # root-side ends: lcnv<i>
SUBNET = "10.77.0"
BRIDGE_IP = f"{SUBNET}.254"
RPC_PORT = 7100
RAFT_PORT = 7200
HTTP_PORT = 7300
LOCK_PATH = Path("/run/lock/logcentric-nemesis.lock")
LOCK_TIMEOUT_S = 600.0
CMD_TIMEOUT_S = 20.0
NODES_MAX = 30


def run_ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """One `ip` command; raises with its stderr when `check` and it fails."""
    proc = subprocess.run(
        ["ip", *args], capture_output=True, text=True, timeout=CMD_TIMEOUT_S, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def available() -> str:
    """'' when network namespaces can be used here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    try:
        run_ip("netns", "list")
    except (OSError, RuntimeError) as exc:
        return f"ip netns does not work here: {exc}"
    for tool in ("iptables", "iptables-restore"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return f"{tool} is missing (scripts/ensure_nemesis.sh installs it)"
    return ""


def namespaces() -> list[str]:
    out = run_ip("netns", "list").stdout.split("\n")
    return [line.split()[0] for line in out if line.startswith(NS_PREFIX)]


def clean_leftovers() -> None:
    """Kill the processes of our namespaces and remove the namespaces and the bridge that a
    run which did not finish left behind."""
    for ns in namespaces():
        pids = run_ip("netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGCONT)
                os.kill(int(pid), signal.SIGKILL)
        run_ip("netns", "del", ns, check=False)
    if run_ip("link", "show", BRIDGE, check=False).returncode == 0:
        run_ip("link", "del", BRIDGE, check=False)
    for line in run_ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(VETH_PREFIX):
            run_ip("link", "del", name, check=False)


@contextlib.contextmanager
def machine_lock(timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """One nemesis cluster on the machine at a time (the namespaces and subnet are fixed)."""
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_PATH, "w") as fd:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{LOCK_PATH} held for {timeout_s:.0f}s") from None
                time.sleep(0.5)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)


class NemesisCluster(LocalCluster):
    """LocalCluster whose nodes live in network namespaces (see the module docstring).

    Use as a context manager: `with NemesisCluster.build(root) as cluster: ...` sets the
    network up, starts the processes, and always stops them and removes the network."""

    def __init__(self, spec: ClusterSpec) -> None:
        super().__init__(spec)
        nodes = [*spec.coordinators, *spec.tservers]
        assert len(nodes) <= NODES_MAX
        self.ns_of: dict[str, str] = {n.name: NS_PREFIX + n.name for n in nodes}
        self.ip_of: dict[str, str] = {n.name: n.rpc.split(":")[0] for n in nodes}
        self._lock: contextlib.ExitStack | None = None
        self.lazy_disks = False
        self.disks = None  # power.Disks when the data dirs are lazyfs mounts (power faults)
        # Added to the environment of every process started from now on: the test-only
        # broken-build switches (LOGCENTRIC_TEST_*), set by a test around a restart.
        self.extra_env: dict[str, str] = {}

    @staticmethod
    def build(
        root: Path,
        coordinators: int = 3,
        tservers: int = 3,
        lease_timeout_s: float = 1.0,
        lazy_disks: bool = False,
        *,
        secure: bool,
    ) -> NemesisCluster:
        """The cluster's spec under `root` (nothing starts before `with`). `lazy_disks`: every
        node's data dir is its own lazyfs mount (tests/nemesis/power.py), for power faults;
        they are mounted on entering. `secure` (said by every caller: CURVE, the admin's
        credentials; see the module docstring): the keys are made on entering."""
        root = root.resolve()
        root.mkdir(parents=True, exist_ok=True)
        spec = ClusterSpec(root=str(root), lease_timeout_s=lease_timeout_s, secure=secure)
        for i in range(coordinators):
            ip = f"{SUBNET}.{i + 1}"
            spec.coordinators.append(
                NodeSpec(
                    name=f"coordinator-{i}",
                    rpc=f"{ip}:{RPC_PORT}",
                    raft=f"{ip}:{RAFT_PORT}",
                    http=f"{ip}:{HTTP_PORT}",  # the web console (also: start needs it today)
                    data=str(root / f"coordinator-{i}"),
                )
            )
        for i in range(tservers):
            ip = f"{SUBNET}.{coordinators + i + 1}"
            spec.tservers.append(
                NodeSpec(
                    name=f"tserver-{i}", rpc=f"{ip}:{RPC_PORT}", data=str(root / f"tserver-{i}")
                )
            )
        spec.password_file.write_text(os.urandom(24).hex() + "\n")
        spec.password_file.chmod(0o600)
        spec.save()
        cluster = NemesisCluster(spec)
        cluster.lazy_disks = lazy_disks
        return cluster

    @property
    def node_names(self) -> list[str]:
        return [n.name for n in (*self.spec.coordinators, *self.spec.tservers)]

    def resolve(self, target: str) -> str:
        """A step's target as a node name: LEADER is the coordinator leader now (the first
        coordinator when none answers as leader: the fault still lands somewhere)."""
        if target.startswith(TABLET_LEADER_OF):
            return self.tablet_leader(target.removeprefix(TABLET_LEADER_OF))
        if target != LEADER:
            return target
        with self.client(timeout_s=3.0) as client:
            leader = self.leader(client)
        return (leader or self.spec.coordinators[0]).name

    def tablet_leader(self, table: str) -> str:
        """The tablet server that leads most tablets of `table` now, as each server reports
        its replicas' roles (the first tablet server when none answers as leader)."""
        from logcentric.tablets import TabletServerClient
        from tservers.fs import FsLayout

        creds = self.credentials()
        led: dict[str, int] = {}
        for node in self.spec.tservers:
            try:
                curve = {}
                if creds is not None:  # as the admin, to the key in the server's data dir
                    key = FsLayout(Path(node.data), "").public_key()
                    curve = {"keypair": creds.keypair, "server_key": key}
                with TabletServerClient(node.rpc, timeout_s=3.0, **curve) as ts:
                    reports = ts.list_tablets().tablets
            except Exception:  # noqa: BLE001 - down or cut off: it leads nothing we can use
                continue
            led[node.name] = sum(1 for r in reports if r.table_name == table and r.role == "LEADER")
        best = max(led, key=lambda n: led[n], default="")
        return best if best and led[best] else self.spec.tservers[0].name

    def node(self, name: str) -> NodeSpec:
        return next(n for n in (*self.spec.coordinators, *self.spec.tservers) if n.name == name)

    # -- network -----------------------------------------------------------------------

    def network_up(self) -> None:
        clean_leftovers()
        run_ip("link", "add", BRIDGE, "type", "bridge")
        run_ip("addr", "add", f"{BRIDGE_IP}/24", "dev", BRIDGE)
        run_ip("link", "set", BRIDGE, "up")
        for i, name in enumerate(self.node_names):
            ns, ip, veth = self.ns_of[name], self.ip_of[name], f"{VETH_PREFIX}{i}"
            run_ip("netns", "add", ns)
            run_ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
            run_ip("link", "set", f"{veth}p", "netns", ns)
            run_ip("-n", ns, "link", "set", f"{veth}p", "name", "eth0")
            run_ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
            run_ip("-n", ns, "link", "set", "eth0", "up")
            run_ip("-n", ns, "link", "set", "lo", "up")
            run_ip("link", "set", veth, "master", BRIDGE)
            run_ip("link", "set", veth, "up")
        logger.info("network up: %s", ", ".join(f"{n}={self.ip_of[n]}" for n in self.node_names))

    def network_down(self) -> None:
        clean_leftovers()

    # -- processes ---------------------------------------------------------------------

    def coordinator_args(self, node: NodeSpec) -> list[str]:
        # The console listens on the node's namespace address, not a loopback one (the
        # test's own private bridge): said public, as a daemon beyond loopback must be
        # (design/security.md section 8).
        return [*super().coordinator_args(node), "--http-public"]

    def _spawn(self, node: NodeSpec, args: list[str]) -> None:
        """LocalCluster._spawn, inside the node's namespace (`ip netns exec` execs the
        command in place: the pid is the node's)."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with deferred_interrupts(), open(self.log_dir / f"{node.name}.log", "ab") as out:
            popen = subprocess.Popen(
                ["ip", "netns", "exec", self.ns_of[node.name], sys.executable, "-m", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **self.extra_env, "PYTHONUNBUFFERED": "1"},
            )
            self.started.append(popen)
            node.pid = popen.pid
            self.spec.save()
        deadline = time.monotonic() + CMD_TIMEOUT_S
        while not self.is_up(node) and popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def pause(self, name: str) -> None:
        node = self.node(name)
        if self.is_up(node):
            os.kill(node.pid, signal.SIGSTOP)

    def resume(self, name: str) -> None:
        node = self.node(name)
        if self.is_up(node):
            os.kill(node.pid, signal.SIGCONT)

    # -- life --------------------------------------------------------------------------

    def __enter__(self) -> NemesisCluster:
        stack = contextlib.ExitStack()
        stack.enter_context(machine_lock())
        self._lock = stack
        try:
            if self.lazy_disks:
                self._mount_disks()
            # In the data dirs: on the lazyfs mounts, when lazy. Once: a folder used again
            # (`python -m tests.nemesis --dir`) keeps the admin its log bootstrapped.
            if self.spec.secure and not self.spec.admin_credentials.exists():
                make_secure_keys(self.spec)
                self.spec.save()
            self.network_up()
            self.up(timeout_s=180)
        except BaseException:
            self.close()
            raise
        return self

    def _mount_disks(self) -> None:
        from tests.nemesis.power import Disks  # FUSE: imported only when used

        self.disks = Disks(self.root)
        for node in [*self.spec.coordinators, *self.spec.tservers]:
            mounted = self.disks.mount(node.name)
            node.data = str(mounted)
        self.spec.save()

    def restart(self, name: str) -> None:
        """Start a node that is down again (after a power loss), in its namespace."""
        node = self.node(name)
        if node in self.spec.coordinators:
            self.start_coordinator(self.spec.coordinators.index(node))
        else:
            self.start_tserver(self.spec.tservers.index(node))

    def restart_with_env(self, names: list[str], env: dict[str, str]) -> None:
        """Stop these nodes, start them again with exactly `env` added to their environment
        (an empty dict: none), and wait until the cluster is ready."""
        self.extra_env = dict(env)
        for name in names:
            self.stop(self.node(name))
        for name in names:
            self.restart(name)
        self.wait_ready(timeout_s=120)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._lock is None:
            # Never entered, or closed already: the machine's namespaces may be another
            # cluster's now (one that holds the lock), and cleaning them would kill it.
            return
        try:
            for node in [*self.spec.tservers, *self.spec.coordinators]:
                with contextlib.suppress(ProcessLookupError):
                    self.resume(node.name)
            self.stop_started(timeout_s=10.0)
        finally:
            try:
                self.network_down()
                if self.disks is not None:
                    self.disks.close()
                    self.disks = None
            finally:
                if self._lock is not None:
                    self._lock.close()
                    self._lock = None
