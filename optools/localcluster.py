"""`coordinator local-cluster up|down|status`: a whole cluster as local processes.

Starts N coordinator nodes (embedded logstore, cluster password) and M tablet servers
(heartbeating to every node) as real processes on 127.0.0.1, with their data and logs under
one folder. The folder's `cluster.json` records ports, data dirs and pids, so that `up` on an
existing folder restarts the same cluster on the same addresses (a logstore replica's Raft
address is its identity), `down` stops it and keeps the data, and `status` tells who is up.

`up` registers the cluster in the clusters file (`local` unless `--name`) and prints the
line to connect; `down --wipe` removes that registration while it still names this cluster.
Ctrl-C during `up` stops every process that run started (SIGTERM, SIGKILL after a bounded
grace, each reaped; the `fs format` runs too), reaps or waits out any descendant left in its
own process group (a child caught between its fork and its setsid), then ends with one line
and exit status 130. `up --json` and `status --json` print one JSON document (design/client.md).

A new cluster is secure (CURVE; design/security.md section 5): `up` makes every coordinator
node's key pair before its first start and the admin's credentials (`<dir>/admin.credentials`,
0600, naming every coordinator with its key), starts the nodes with `--curve
--admin-public-key`, formats the tablet servers (each makes its key pair), admits each one
(a `tserver` principal named by its UUID with its key, the `server` role) as the admin, and
starts them with `--curve --coordinator-keys`; the cluster is registered with the admin's
credentials. `up --insecure` makes a plaintext cluster instead (every daemon started with its
`--insecure`) and says so loudly on stderr, as every later `up` of that folder does.
`cluster.json` records `secure`: an existing folder keeps what it is.

This is the embedded default for the main job, the Spark tests and anyone trying the system.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rpc import errors
from rpc.addresses import free_port
from rpc.console import (
    add_json,
    deferred_interrupts,
    ignored_interrupts,
    interruptible,
    print_json,
    run_command,
)

STATE_FILE = "cluster.json"
READY_TIMEOUT_S_DEFAULT = 120.0
NEW_COORDINATORS = 3  # `local-cluster up` of a new cluster without counts
NEW_TSERVERS = 3
STOP_TIMEOUT_S = 15.0
# An interrupted `up`: how long a process it started has to act on SIGTERM before SIGKILL.
STOP_GRACE_S = 10.0
INSECURE_WARNING = (
    "WARNING: INSECURE cluster in {root}: plaintext, no authentication; anyone who can "
    "reach one of its ports can read, write or drop tables (a new cluster without "
    "--insecure is secure)"
)


@dataclass
class NodeSpec:
    name: str
    rpc: str
    data: str
    raft: str = ""  # coordinators only
    http: str = ""  # HOST:PORT of /metrics, /healthz, /readyz (and a coordinator's console)
    pid: int = 0


@dataclass
class ClusterSpec:
    root: str
    coordinators: list[NodeSpec] = field(default_factory=list)
    tservers: list[NodeSpec] = field(default_factory=list)
    lease_timeout_s: float = 1.5
    registered_as: str = ""  # its name in the clusters file, once `up` registered it
    # CURVE everywhere, the admin's credentials in the folder. A cluster.json written before
    # this field existed is a plaintext cluster's (`load`).
    secure: bool = True

    @property
    def admin_credentials(self) -> Path:
        return Path(self.root) / "admin.credentials"

    @property
    def admin_public_key_file(self) -> Path:
        return Path(self.root) / "admin.key"

    @property
    def coordinator_addresses(self) -> list[str]:
        return [n.rpc for n in self.coordinators]

    @property
    def password_file(self) -> Path:
        return Path(self.root) / "password"

    def save(self) -> None:
        path = Path(self.root) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)

    @staticmethod
    def load(root: Path) -> ClusterSpec | None:
        path = root / STATE_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        return ClusterSpec(
            root=raw["root"],
            coordinators=[NodeSpec(**n) for n in raw["coordinators"]],
            tservers=[NodeSpec(**n) for n in raw["tservers"]],
            lease_timeout_s=raw.get("lease_timeout_s", 1.5),
            registered_as=raw.get("registered_as", ""),
            secure=bool(raw.get("secure", False)),
        )


def _alive(pid: int, marker: str) -> bool:
    """Whether `pid` runs and is ours (its command line names our data dir).

    An empty command line with a thread still running counts as running: a process reads
    that way in the middle of an exec (the new program's arguments are not mapped yet; `ip
    netns exec` execs the node's python in place, and a CI run took a coordinator for dead
    in that moment), and when its main thread has exited while other threads still run."""
    if pid <= 0:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    if not cmdline:
        return not _exited(pid, marker)
    return marker in cmdline.replace(b"\0", b" ").decode(errors="replace")


def _exited(pid: int, marker: str) -> bool:
    """Whether every thread of `pid` has exited (gone, or only zombies left): its files,
    sockets included, are closed then. A pid now running another program (its cmdline
    does not name our data dir) counts as exited."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    if cmdline and marker.encode() not in cmdline:
        return True
    for task in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{task}/stat").read_text()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] not in ("Z", "X"):
            return False
    return True


class LocalCluster:
    """Start, stop, kill and inspect the processes of one cluster folder."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.root = Path(spec.root)
        self.log_dir = self.root / "logs"
        # The processes this object started (children of this process), for
        # `stop_started` after an interrupted `up`: their Popen, not a pid read back.
        self.started: list[subprocess.Popen] = []

    @staticmethod
    def create(
        root: Path,
        coordinators: int | None,
        tservers: int | None,
        lease_timeout_s: float,
        *,
        secure: bool = True,
    ) -> LocalCluster:
        """The cluster in `root`, or a new one there. A count left None is the existing
        cluster's own (NEW_COORDINATORS / NEW_TSERVERS for a new one); other counts than
        an existing cluster's are refused. A new cluster is a CURVE one unless `secure` is
        False (plaintext); an existing one keeps what it is, whatever `secure` says (the
        command line refuses a flag that contradicts the folder: `check_mode`)."""
        root = root.resolve()
        if root.exists() and not root.is_dir():
            raise errors.BadRequest(f"{root} is not a directory")
        existing = ClusterSpec.load(root)
        if existing is not None:
            coordinators = len(existing.coordinators) if coordinators is None else coordinators
            tservers = len(existing.tservers) if tservers is None else tservers
            if len(existing.coordinators) != coordinators or len(existing.tservers) != tservers:
                raise errors.BadRequest(
                    f"{root} holds a cluster of {len(existing.coordinators)} coordinator(s) and "
                    f"{len(existing.tservers)} tablet server(s); use the same numbers or --wipe"
                )
            for node in [*existing.coordinators, *existing.tservers]:
                if not node.http:  # a folder made before daemons served HTTP
                    node.http = f"127.0.0.1:{free_port()}"
                    existing.save()
            return LocalCluster(existing)
        coordinators = NEW_COORDINATORS if coordinators is None else coordinators
        tservers = NEW_TSERVERS if tservers is None else tservers
        if coordinators < 1 or tservers < 0:
            raise errors.BadRequest("need at least one coordinator and no negative tservers")
        root.mkdir(parents=True, exist_ok=True)
        spec = ClusterSpec(root=str(root), lease_timeout_s=lease_timeout_s, secure=secure)
        for i in range(coordinators):
            spec.coordinators.append(
                NodeSpec(
                    name=f"coordinator-{i}",
                    rpc=f"127.0.0.1:{free_port()}",
                    raft=f"127.0.0.1:{free_port()}",
                    http=f"127.0.0.1:{free_port()}",
                    data=str(root / f"coordinator-{i}"),
                )
            )
        for i in range(tservers):
            spec.tservers.append(
                NodeSpec(
                    name=f"tserver-{i}",
                    rpc=f"127.0.0.1:{free_port()}",
                    http=f"127.0.0.1:{free_port()}",
                    data=str(root / f"tserver-{i}"),
                )
            )
        spec.password_file.write_text(secrets.token_hex(24) + "\n")
        spec.password_file.chmod(0o600)
        if secure:
            _make_secure(spec)
        spec.save()
        return LocalCluster(spec)

    # -- processes ---------------------------------------------------------------------

    def _spawn(self, node: NodeSpec, args: list[str]) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        # Ctrl-C waits until the process is started and recorded: none is left unknown.
        with deferred_interrupts(), open(self.log_dir / f"{node.name}.log", "ab") as out:
            popen = subprocess.Popen(
                [sys.executable, "-m", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # survives the command that started it
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            self.started.append(popen)
            node.pid = popen.pid
            self.spec.save()
        # Until the child has exec'd, /proc/PID/cmdline is still ours: wait for it, so that
        # is_up() is right from here on.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while not self.is_up(node) and popen.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)

    def _format(self, node: NodeSpec) -> None:
        """`tserver fs format` of the node's root, as a child tracked like the daemons: a
        Ctrl-C during it stops it with them (`stop_started`) and nothing is left formatting.
        Out of our process group: a Ctrl-C meant for `up` must interrupt `up` (which then
        stops what it started), not kill the format under it first, which `up` would report
        as a failed format rather than as an interruption."""
        argv = [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", node.data]
        with deferred_interrupts():
            popen = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.started.append(popen)
        out, err = popen.communicate()
        if popen.returncode != 0:
            raise subprocess.CalledProcessError(popen.returncode, argv, out, err)

    def coordinator_args(self, node: NodeSpec) -> list[str]:
        peers = ",".join(n.raft for n in self.spec.coordinators if n is not node)
        args = [
            "optools.coordinator_cli", "start",
            "--id", node.name,
            "--data-dir", node.data,
            "--bind", node.rpc,
            "--raft", node.raft,
            "--password-file", str(self.spec.password_file),
            "--lease-timeout-s", str(self.spec.lease_timeout_s),
        ]  # fmt: skip
        if peers:
            args += ["--peers", peers]
        if node.http:
            args += ["--http", node.http]
        if self.spec.secure:
            args += ["--curve", "--admin-public-key", str(self.spec.admin_public_key_file)]
        else:
            args += ["--insecure"]  # plaintext, said explicitly (the daemons' default turns)
        return args

    def start_coordinator(self, i: int) -> None:
        node = self.spec.coordinators[i]
        if not self.is_up(node):
            self._spawn(node, self.coordinator_args(node))

    def start_tserver(self, i: int, extra_args: Sequence[str] = ()) -> None:
        """Start tablet server `i` (formatting its fs root first if new); `extra_args` go
        to its `tservers.cli start` after the cluster's own (e.g. `--startup-threads 4`)."""
        node = self.spec.tservers[i]
        if self.is_up(node):
            return
        if not (Path(node.data) / "instance").exists():
            self._format(node)
        args = [
            "tservers.cli", "start",
            "--fs-root", node.data,
            "--bind", node.rpc,
            "--coordinators", ",".join(self.spec.coordinator_addresses),
            # The cluster's password: its privileged methods (DeleteTablet, ChangeConfig,
            # StartTabletCopy) answer only the coordinators and its peers.
            "--password-file", str(self.spec.password_file),
        ]  # fmt: skip
        if node.http:
            args += ["--http", node.http]
        if self.spec.secure:
            keys = ",".join(_coordinator_key(n) for n in self.spec.coordinators)
            args += ["--curve", f"--coordinator-keys={keys}"]  # a key may begin with "-"
        else:
            args += ["--insecure"]
        self._spawn(node, [*args, *extra_args])

    def up(self, timeout_s: float = READY_TIMEOUT_S_DEFAULT, progress=None) -> None:
        deadline = time.monotonic() + timeout_s
        for i in range(len(self.spec.coordinators)):
            self.start_coordinator(i)
        for i in range(len(self.spec.tservers)):
            self.start_tserver(i)
        if self.spec.secure:
            self.admit_tservers(deadline - time.monotonic())
        self.wait_ready(max(1.0, deadline - time.monotonic()), progress)

    # -- a secure cluster ----------------------------------------------------------------

    def credentials(self):
        """The admin's credentials (a secure cluster), else None."""
        if not self.spec.secure:
            return None
        from rpc import credentials

        return credentials.load(self.spec.admin_credentials)

    def tserver_client(self, node: NodeSpec, timeout_s: float = 10.0):
        """A client of the tablet server `node` (by the UUID of its fs root): as the admin,
        with the server's own key, on a secure cluster; plaintext on a plaintext one."""
        from logcentric.tablets import TabletServerClient
        from tservers.fs import FsLayout

        uuid = FsLayout.read_instance(Path(node.data)).uuid
        creds = self.credentials()
        if creds is None:
            return TabletServerClient(node.rpc, uuid, timeout_s=timeout_s)
        key = FsLayout(Path(node.data), uuid).public_key()
        return TabletServerClient(
            node.rpc, uuid, timeout_s=timeout_s, keypair=creds.keypair, server_key=key
        )

    def admit_tservers(self, timeout_s: float) -> None:
        """Log a `tserver` principal (its UUID, its key, the server role) for every tablet
        server of the folder, as the admin; one already admitted with that key is left as
        it is. Retried (same request id: exactly once) until the bootstrap admin is logged
        and a leader serves, within `timeout_s`."""
        from rpc.protocols import coordinator_pb2 as pb
        from tservers.fs import FsError, FsLayout

        deadline = time.monotonic() + timeout_s
        with self.client(timeout_s=5.0) as client:
            for node in self.spec.tservers:
                try:
                    fs = FsLayout(Path(node.data), FsLayout.read_instance(Path(node.data)).uuid)
                    key = fs.public_key()
                except FsError as e:
                    # A damaged root: its tablet server fails at its start too. Say that, with
                    # its log, once it has exited (bounded), rather than this alone.
                    while time.monotonic() < deadline and self.is_up(node):
                        time.sleep(0.05)
                    self._check_running()
                    raise errors.Unavailable(f"{node.name}: {e}") from None
                request = pb.AddPrincipalRequest(
                    request_id=client.next_request_id(),
                    name=fs.uuid,
                    kind="tserver",
                    public_key=key,
                    roles=["server"],
                )
                while True:
                    self._check_running()
                    try:
                        client.call("AddPrincipal", request, pb.AddPrincipalResponse, 5.0)
                        break
                    except errors.AlreadyExists as err:
                        if self._admitted(client, fs.uuid, key):
                            break
                        raise errors.IllegalState(
                            f"cannot admit {node.name} ({fs.uuid}): {err.message}"
                        ) from None
                    except errors.RpcError as err:
                        if time.monotonic() >= deadline:
                            raise errors.TimedOut(
                                f"could not admit {node.name} ({fs.uuid}) within "
                                f"{timeout_s:.0f}s: {err} (logs in {self.log_dir})"
                            ) from None
                        time.sleep(0.2)

    @staticmethod
    def _admitted(client, name: str, key: str) -> bool:
        from rpc.protocols import coordinator_pb2 as pb

        listed = client.call("ListPrincipals", pb.ListPrincipalsRequest(),
                             pb.ListPrincipalsResponse, 5.0)  # fmt: skip
        return any(
            p.name == name and p.public_key == key and p.state == "active"
            for p in listed.principals
        )

    def is_up(self, node: NodeSpec) -> bool:
        return _alive(node.pid, node.data)

    def kill(self, node: NodeSpec, sig: int = signal.SIGKILL) -> None:
        if self.is_up(node):
            os.kill(node.pid, sig)
            if sig == signal.SIGKILL:
                self._wait_gone(node, STOP_TIMEOUT_S)

    def stop(self, node: NodeSpec) -> None:
        if not self.is_up(node):
            return
        os.kill(node.pid, signal.SIGCONT)
        os.kill(node.pid, signal.SIGTERM)
        if not self._wait_gone(node, STOP_TIMEOUT_S):
            os.kill(node.pid, signal.SIGKILL)
            self._wait_gone(node, STOP_TIMEOUT_S)

    def _wait_gone(self, node: NodeSpec, timeout_s: float) -> bool:
        """Wait until the process has exited with all its threads, so its sockets are
        closed and its ports free. Its cmdline reads empty earlier, as soon as its main
        thread dropped its memory, while other threads may still hold the sockets: a
        restart on the same port then failed with 'Address already in use'."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                # Reaps only once the whole thread group has exited (our child).
                if os.waitpid(node.pid, os.WNOHANG)[0] == node.pid:
                    return True
            except ChildProcessError:  # not our child (or reaped already)
                if _exited(node.pid, node.data):
                    return True
            time.sleep(0.05)
        return False

    def down(self) -> None:
        for node in [*self.spec.tservers, *self.spec.coordinators]:
            self.stop(node)

    def stop_started(
        self, grace_s: float = STOP_GRACE_S, timeout_s: float = STOP_TIMEOUT_S
    ) -> list[int]:
        """Stop every process this object started (an interrupted `up`): SIGTERM to all,
        SIGKILL to those still running after `grace_s`, then wait (within `timeout_s`) until
        each is reaped with all its threads gone. By their Popen, recorded before a Ctrl-C
        can land (`_spawn`, `_format`), so that one stopped before it exec'd is not missed.
        Returns the pids that would not go (none, unless a process is stuck in the kernel):
        the caller says so."""
        alive = [p for p in self.started if p.poll() is None]
        for popen in alive:
            with contextlib.suppress(ProcessLookupError):
                popen.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                popen.terminate()
        grace_end = time.monotonic() + grace_s
        for popen in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(max(0.0, grace_end - time.monotonic()))
        for popen in alive:
            if popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    popen.kill()
        deadline = time.monotonic() + timeout_s
        stuck = []
        for popen in alive:
            try:
                popen.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                stuck.append(popen.pid)
        return stuck

    # -- readiness and status ----------------------------------------------------------

    def client(self, timeout_s: float = 10.0):
        from logcentric.meta import CoordinatorClient

        return CoordinatorClient(
            self.spec.coordinator_addresses, timeout_s=timeout_s, credentials=self.credentials()
        )

    def leader(self, client) -> NodeSpec | None:
        for node in self.spec.coordinators:
            if not self.is_up(node):
                continue
            try:
                if client.status(node.rpc, timeout_s=1.0).role == "LEADER":
                    return node
            except errors.RpcError:
                continue
        return None

    def wait_ready(self, timeout_s: float, progress=None) -> None:
        """Until a leader serves, every running node answers (a tablet server its own ping:
        the coordinator may still list as LIVE one that was stopped a moment ago and has
        just been restarted, and may fail at start), and every running tablet server is
        enlisted and live. A node that exits meanwhile fails it at once, with its log."""
        deadline = time.monotonic() + timeout_s
        expected = {n.rpc for n in self.spec.tservers if self.is_up(n)}
        serving: set[str] = set()  # tablet servers that answered a ping
        with self.client(timeout_s=5.0) as client:
            while True:
                self._check_running()
                leader = self.leader(client)
                silent = [
                    n.name
                    for n in self.spec.coordinators
                    if self.is_up(n) and not self._answers(client, n)
                ]
                for n in self.spec.tservers:
                    if n.rpc in expected and n.rpc not in serving and self._pings(n):
                        serving.add(n.rpc)
                silent += [n.name for n in self.spec.tservers if n.rpc in expected - serving]
                live: set[str] = set()
                if leader is not None:
                    try:
                        live = {s.address for s in client.list_servers() if s.state == "LIVE"}
                    except errors.RpcError:
                        live = set()
                if progress is not None:
                    progress(leader is not None, len(live & expected), len(expected))
                if leader is not None and not silent and expected <= live:
                    return
                if time.monotonic() >= deadline:
                    raise errors.TimedOut(
                        f"cluster not ready after {timeout_s:.0f}s: leader "
                        f"{'up' if leader else 'missing'}, not answering: {silent or 'none'}, "
                        f"{len(live & expected)}/{len(expected)} tablet servers live "
                        f"(logs in {self.log_dir})"
                    )
                time.sleep(0.2)

    @staticmethod
    def _answers(client, node: NodeSpec) -> bool:
        try:
            client.status(node.rpc, timeout_s=1.0)
            return True
        except errors.RpcError:
            return False

    def _check_running(self) -> None:
        for node in [*self.spec.coordinators, *self.spec.tservers]:
            if node.pid and not self.is_up(node):
                log_path = self.log_dir / f"{node.name}.log"
                last = (
                    log_path.read_text(errors="replace").splitlines()[-5:]
                    if log_path.exists()
                    else []
                )
                raise errors.Unavailable(
                    f"{node.name} is not running; last lines of {log_path}:\n" + "\n".join(last)
                )

    def status(self) -> dict:
        """Who is up, as `local-cluster status --json` prints it (design/client.md):
        {"root", "healthy", "coordinators": [...], "tservers": [...]}, each node
        {"name", "address", "pid", "up", "state", "error"} (+ "epoch" for a coordinator).
        state: a coordinator's role (LEADER, FOLLOWER, ...), a tablet server's state in the
        coordinator's view (LIVE, DOWN, "not enlisted"); "" when the process is not up."""
        coordinators, tservers, healthy = [], [], True
        with self.client(timeout_s=3.0) as client:
            for node in self.spec.coordinators:
                row = {"name": node.name, "address": node.rpc, "pid": node.pid, "up": False,
                       "state": "", "epoch": 0, "error": ""}  # fmt: skip
                coordinators.append(row)
                if not self.is_up(node):
                    healthy = False
                    continue
                row["up"] = True
                try:
                    st = client.status(node.rpc, timeout_s=1.0)
                    row["state"], row["epoch"] = st.role, st.epoch
                except errors.RpcError as err:
                    row["error"] = f"not answering: {err}"
                    healthy = False
            try:
                # A server wiped and started again at its address enlists under a new
                # UUID while the old record goes DOWN: the live record of an address wins.
                states: dict[str, str] = {}
                for s in client.list_servers():
                    if s.state == "LIVE" or s.address not in states:
                        states[s.address] = s.state
            except errors.RpcError:
                states = {}
            for node in self.spec.tservers:
                row = {"name": node.name, "address": node.rpc, "pid": node.pid, "up": False,
                       "state": "", "error": ""}  # fmt: skip
                tservers.append(row)
                if not self.is_up(node):
                    healthy = False
                    continue
                row["up"] = True
                row["state"] = states.get(node.rpc, "not enlisted")
                healthy &= row["state"] == "LIVE"
        return {
            "root": str(self.root),
            "healthy": healthy,
            "coordinators": coordinators,
            "tservers": tservers,
        }

    def status_lines(self) -> tuple[list[str], bool]:
        """`status` for people: one line per process, and whether all is well."""
        st = self.status()
        lines = []
        for row in st["coordinators"]:
            head = f"{row['name']:16} {row['address']:22}"
            if not row["up"]:
                lines.append(f"{head} DOWN")
            elif row["error"]:
                lines.append(f"{head} up (pid {row['pid']}), {row['error']}")
            else:
                lines.append(f"{head} up (pid {row['pid']}) {row['state']} epoch {row['epoch']}")
        for row in st["tservers"]:
            head = f"{row['name']:16} {row['address']:22}"
            lines.append(
                f"{head} up (pid {row['pid']}) {row['state']}" if row["up"] else f"{head} DOWN"
            )
        return lines, st["healthy"]

    def _pings(self, node: NodeSpec) -> bool:
        """Whether the tablet server answers rpc.Ping (it serves: past its start-up checks;
        a secure one: as the admin, once its table from the leader admits the admin)."""
        if not self.spec.secure:
            return _pings(node.rpc)
        from rpc.client import RpcClient
        from tservers.fs import FsLayout

        try:
            creds = self.credentials()
            key = FsLayout(Path(node.data), "").public_key()
            with RpcClient(node.rpc, "local-cluster", curve=creds.client_curve(),
                           server_key=key) as rc:  # fmt: skip
                rc.ping(timeout_s=1.0)
            return True
        except errors.RpcError:
            return False


def _own_group_descendants() -> list[int]:
    """Our descendants (children, theirs, ...) that are still in our process group, zombies
    included. Only descendants: a shell pipeline (`up | tee log`) shares our group too."""
    me, group = os.getpid(), os.getpgrp()
    parent_of: dict[int, int] = {}
    group_of: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        parent_of[int(entry)], group_of[int(entry)] = int(fields[1]), int(fields[2])
    found = []
    for pid, pgid in group_of.items():
        if pid == me or pgid != group:
            continue
        seen, up = set(), parent_of.get(pid, 0)
        while up > 1 and up not in seen and up != me:
            seen.add(up)
            up = parent_of.get(up, 0)
        if up == me:
            found.append(pid)
    return found


def _start_time(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), None once it is gone: a pid that
    names another process later (reused) has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def group_snapshot() -> dict[int, int]:
    """Our descendants in our process group, with their start times (`_sweep_own_group`
    waits for exactly these). Taken before a parent of theirs is ended: once it is, they
    are orphans of init, no longer seen as ours, yet still in the group until reaped."""
    found = {}
    for pid in _own_group_descendants():
        started = _start_time(pid)
        if started is not None:
            found[pid] = started
    return found


def _sweep_own_group(timeout_s: float, known: dict[int, int] | None = None) -> list[int]:
    """SIGKILL any descendant of ours left in our process group (and those of `known`, a
    `group_snapshot` taken earlier), reap those that are our children, and wait until every
    one is gone from the process table (an orphan's zombie until init reaps it), within
    `timeout_s`: after an interrupted command nothing is left in the group the terminal
    signalled. Returns the pids still there at the deadline."""
    deadline = time.monotonic() + timeout_s
    known = dict(known or {})
    killed: set[int] = set()
    while True:
        known.update(group_snapshot())
        present = [pid for pid, started in known.items() if _start_time(pid) == started]
        for pid in present:
            if pid not in killed:
                killed.add(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # reaped here if ours
        present = [pid for pid, started in known.items() if _start_time(pid) == started]
        if not present or time.monotonic() >= deadline:
            return present
        time.sleep(0.02)


def _pings(address: str) -> bool:
    """Whether a server answers rpc.Ping at `address` (it serves: past its start-up checks)."""
    from rpc.client import RpcClient

    try:
        with RpcClient(address, "local-cluster") as rc:
            rc.ping(timeout_s=1.0)
        return True
    except errors.RpcError:
        return False


def _coordinator_key(node: NodeSpec) -> str:
    """A coordinator node's public key, from its data dir (made by `_make_secure`)."""
    from coordinator.node import KEY_NAME, KEYS_DIR
    from rpc import keys

    return keys.load_public_key(keys.public_path(Path(node.data) / KEYS_DIR, KEY_NAME))


def _make_secure(spec: ClusterSpec) -> None:
    """A new secure cluster's keys: every coordinator node's pair in its data dir (as its
    first start with --curve would make it), and the admin's pair: its public key for the
    nodes' --admin-public-key, its credentials file (0600) naming every node with its key."""
    from coordinator.node import KEY_NAME, KEYS_DIR
    from rpc import credentials, keys

    nodes = []
    for node in spec.coordinators:
        Path(node.data).mkdir(parents=True, exist_ok=True)
        pair = keys.load_or_create_keypair(Path(node.data) / KEYS_DIR, KEY_NAME)
        nodes.append((node.rpc, pair.public))
    admin = keys.KeyPair.generate()
    spec.admin_public_key_file.write_text(admin.public + "\n")
    credentials.write(
        spec.admin_credentials,
        credentials.document("admin", "user", ["admin"], admin, nodes),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="lc_command", required=True, metavar="{up,down,status}")
    up = sub.add_parser("up", help="start (or restart) the cluster and wait until it is ready")
    up.add_argument("--dir", type=Path, required=True, help="folder for data, logs, cluster.json")
    up.add_argument(
        "--coordinators",
        type=int,
        default=None,
        help="coordinator nodes of a new cluster (default 3; an existing one keeps its own)",
    )
    up.add_argument(
        "--tservers",
        type=int,
        default=None,
        help="tablet servers of a new cluster (default 3; an existing one keeps its own)",
    )
    up.add_argument("--lease-timeout-s", type=float, default=1.5)
    up.add_argument("--wipe", action="store_true", help="delete an existing cluster in --dir first")
    up.add_argument("--timeout-s", type=float, default=READY_TIMEOUT_S_DEFAULT)
    up.add_argument(
        "--name",
        default="local",
        help="register the cluster under this name in the clusters file (default local)",
    )
    up.add_argument("--no-register", action="store_true", help="do not write the clusters file")
    mode = up.add_mutually_exclusive_group()
    mode.add_argument(
        "--secure",
        dest="mode",
        action="store_const",
        const="secure",
        help="a new cluster with CURVE everywhere (the default; accepted for scripts that "
        "say it): key pairs for every process, the admin's credentials in "
        "DIR/admin.credentials, tablet servers admitted (design/security.md)",
    )
    mode.add_argument(
        "--insecure",
        dest="mode",
        action="store_const",
        const="insecure",
        help="a new cluster in plaintext, without authentication: anyone who reaches a port "
        "can read, write or drop tables (printed as a WARNING at every up)",
    )
    add_json(up, "addresses, folder and registration, once up")
    down = sub.add_parser("down", help="stop every process (data is kept)")
    down.add_argument("--dir", type=Path, required=True)
    down.add_argument(
        "--wipe",
        action="store_true",
        help="also delete the folder, and its entry in the clusters file if it names this cluster",
    )
    st = sub.add_parser("status", help="who is up; exit status 1 when anything is down")
    st.add_argument("--dir", type=Path, required=True)
    add_json(st, "each process: up, state")
    parser.set_defaults(func=run)


def run(args) -> int:
    root: Path = args.dir.resolve()
    if args.lc_command == "up":
        if args.wipe:
            _wipe(root)
        check_mode(root, args.mode)
        cluster = LocalCluster.create(
            root,
            args.coordinators,
            args.tservers,
            args.lease_timeout_s,
            secure=args.mode != "insecure",
        )
        if not cluster.spec.secure:
            print(INSECURE_WARNING.format(root=root), file=sys.stderr, flush=True)
        return _up(cluster, args)
    spec = ClusterSpec.load(root)
    if spec is None:
        raise errors.NotFound(f"no cluster in {root} (no {STATE_FILE})")
    cluster = LocalCluster(spec)
    if args.lc_command == "down":
        cluster.down()
        print(f"cluster in {root} stopped")
        if args.wipe:
            name = _wipe(root)
            print(f"{root} deleted")
            if name:
                print(f"cluster {name!r} removed from the clusters file")
        return 0
    if args.json:
        st = cluster.status()
        print_json(st)
        return 0 if st["healthy"] else 1
    lines, healthy = cluster.status_lines()
    print("\n".join(lines))
    return 0 if healthy else 1


def check_mode(root: Path, mode: str | None) -> None:
    """Refuse a --secure or --insecure that contradicts the cluster already in `root`: a
    folder keeps what it is (a key pair is an identity; a plaintext cluster's tablet servers
    were never admitted), so changing it means a new cluster (--wipe)."""
    existing = ClusterSpec.load(root)
    if existing is None or mode is None:
        return
    if mode == "secure" and not existing.secure:
        raise errors.BadRequest(
            f"{root} holds a plaintext cluster: a secure one is a new cluster (add --wipe)"
        )
    if mode == "insecure" and existing.secure:
        raise errors.BadRequest(
            f"{root} holds a secure cluster: a plaintext one is a new cluster (add --wipe)"
        )


def _up(cluster: LocalCluster, args) -> int:
    """Start the cluster and wait until it is ready; Ctrl-C meanwhile stops every process
    this run started (a second Ctrl-C is ignored until they are stopped) and ends the
    command (rpc.console.run_command: one line, exit status 130)."""
    started = time.monotonic()
    bar = _progress(len(cluster.spec.tservers))
    try:
        cluster.up(args.timeout_s, bar.update)
    except KeyboardInterrupt:
        with ignored_interrupts():
            bar.close()
            known = group_snapshot()  # before their parents are stopped
            stuck = cluster.stop_started()
            # The command's own group, which the terminal signalled, is left empty too
            # (not in stop_started: a test process calling that has children of its own).
            stuck += _sweep_own_group(STOP_TIMEOUT_S, known)
        if stuck:  # the one line is run_command's; this says what could not be stopped
            print(
                f"coordinator local-cluster: could not stop pids {stuck}",
                file=sys.stderr,
                flush=True,
            )
        raise
    finally:
        bar.close()
    elapsed_s = time.monotonic() - started
    path = None
    if not args.no_register:
        from logcentric import clusters

        creds = str(cluster.spec.admin_credentials) if cluster.spec.secure else ""
        path = clusters.register(args.name, cluster.spec.coordinator_addresses, credentials=creds)
        cluster.spec.registered_as = args.name
        cluster.spec.save()
    if args.json:
        print_json(
            {
                "root": str(cluster.root),
                "coordinators": cluster.spec.coordinator_addresses,
                "tservers": [n.rpc for n in cluster.spec.tservers],
                "cluster": None if path is None else args.name,
                "clusters_file": None if path is None else str(path),
                "elapsed_s": round(elapsed_s, 3),
                "secure": cluster.spec.secure,
                "credentials": str(cluster.spec.admin_credentials) if cluster.spec.secure else None,
            }
        )
        return 0
    print(f"cluster up in {elapsed_s:.1f}s; data and logs in {cluster.root}")
    print(f"coordinators: {','.join(cluster.spec.coordinator_addresses)}")
    print(f"tservers: {','.join(n.rpc for n in cluster.spec.tservers)}")
    if cluster.spec.secure:
        print(f"secure (CURVE): admin credentials in {cluster.spec.admin_credentials}")
    consoles = [f"http://{n.http}/" for n in cluster.spec.coordinators if n.http]
    if consoles:
        print(f"web consoles: {'  '.join(consoles)}")
    metrics = [f"{n.name} http://{n.http}/metrics" for n in cluster.spec.tservers if n.http]
    if metrics:
        print(f"tablet server metrics: {'  '.join(metrics)}")
    if path is not None:
        print(f"registered as cluster {args.name!r} in {path}")
        print(
            f'connect: logcentric.connect(cluster="{args.name}")  |  '
            f"coordinator status --cluster {args.name}"
        )
    return 0


def _wipe(root: Path) -> str:
    """Stop and delete the cluster in `root`; its clusters-file entry goes too while it
    still names this cluster's coordinators. Returns the name removed, or ""."""
    spec = ClusterSpec.load(root)
    if spec is not None:
        LocalCluster(spec).down()
    elif root.exists() and any(root.iterdir()):
        raise errors.BadRequest(f"{root} is not a local cluster folder; not deleting it")
    shutil.rmtree(root, ignore_errors=True)
    if spec is None or not spec.registered_as:
        return ""
    from logcentric import clusters

    removed = clusters.unregister_if(spec.registered_as, spec.coordinator_addresses)
    return spec.registered_as if removed else ""


class _progress:
    """A tqdm bar of tablet servers enlisted, shown on a terminal only."""

    def __init__(self, total: int) -> None:
        self._bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc="tablet servers live", unit="server")

    def update(self, leader: bool, live: int, total: int) -> None:
        if self._bar is not None:
            self._bar.set_postfix_str("leader up" if leader else "waiting for a leader")
            self._bar.n = live
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


@interruptible("coordinator local-cluster", exit_within_s=None)  # it stops what it started
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="coordinator local-cluster", description=__doc__.splitlines()[0]
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    return run_command(args.func, args, "coordinator local-cluster", (errors.RpcError, OSError))


if __name__ == "__main__":
    sys.exit(main())
