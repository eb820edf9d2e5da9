"""`logstore serve` replicas as real processes for integration tests and the bench.

`secure=True`: the replica runs CURVE (the default of `logstore serve`) and admits `caller`,
one key pair per group made by `make_replicas`, with both roles (`--client-keys` and
`--admin-keys`), so a test plays a coordinator node and an operator; `remote()` and
`write_credentials()` call it with that key and each replica's key from its start line.
`secure=False` passes `--insecure`: plaintext, for the callers from before CURVE (tests about
something else, the bench).
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from logstore.remote import RemoteLogStore
from rpc import credentials
from rpc.keys import ClientCurve, KeyPair

from .helpers import PASSWORD, free_addresses


@dataclass
class ReplicaProcess:
    raft_address: str
    rpc_address: str
    data_dir: str
    peers: list[str]
    extra_args: list[str] = field(default_factory=list)
    # The program that serves: `logstore serve` unless a bench swaps in another.
    argv_prefix: list[str] = field(
        default_factory=lambda: [
            sys.executable,
            "-m",
            "logstore.cli",
            "--log-level",
            "INFO",
            "serve",
        ]
    )
    proc: subprocess.Popen | None = None
    uuid: str = ""
    log_path: str = ""
    secure: bool = False
    caller: KeyPair | None = None  # secure: admitted with the server and admin roles
    public_key: str = ""  # secure: the replica's, from its start line
    # secure: more keys admitted, besides the caller's (server role / admin role)
    client_keys: list[str] = field(default_factory=list)
    admin_keys: list[str] = field(default_factory=list)
    start_line: str = ""

    def start(self, timeout_s: float = 30.0) -> None:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(self.data_dir, "..", os.path.basename(self.data_dir) + ".log")
        env = dict(os.environ, LOGSTORE_PASSWORD=PASSWORD, PYTHONUNBUFFERED="1")
        cmd = [
            *self.argv_prefix,
            "--raft-address",
            self.raft_address,
            "--peers",
            ",".join(p for p in self.peers if p != self.raft_address),
            "--rpc-bind",
            self.rpc_address,
            "--data-dir",
            self.data_dir,
            *self._security_args(),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
        log.close()
        line = _read_line(self.proc, timeout_s)
        if not line.startswith("logstore serving"):
            self.kill()
            raise RuntimeError(f"replica {self.raft_address} did not start: {line!r}")
        self.start_line = line
        fields = dict(part.split("=", 1) for part in line.split()[2:] if "=" in part)
        self.uuid = fields["uuid"]
        assert fields["rpc"] == self.rpc_address, fields
        if self.secure:
            self.public_key = fields["curve-key"]
        elif self._logstore_serve():
            assert "INSECURE" in line, line

    def _logstore_serve(self) -> bool:
        """Whether the program is `logstore serve` (a bench's own takes no key flags)."""
        return "logstore.cli" in self.argv_prefix

    def _security_args(self) -> list[str]:
        if not self.secure:
            return ["--insecure"] if self._logstore_serve() else []
        assert self.caller is not None, "a secure replica admits the group's caller key"
        # FLAG=VALUE: a z85 key may begin with "-".
        return [
            "--client-keys=" + ",".join([self.caller.public, *self.client_keys]),
            "--admin-keys=" + ",".join([self.caller.public, *self.admin_keys]),
        ]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self._reap()

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(15)
            finally:
                if self.proc.stdout is not None:
                    self.proc.stdout.close()


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    buf = b""
    try:
        while b"\n" not in buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or proc.poll() is not None and not sel.select(0):
                break
            if sel.select(min(remaining, 0.5)):
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
    finally:
        sel.close()
    return buf.decode(errors="replace").strip()


def make_replicas(
    tmp_path, n: int, extra_args: list[str] | None = None, *, secure: bool = False
) -> list[ReplicaProcess]:
    addrs = free_addresses(2 * n)
    raft, rpc = addrs[:n], addrs[n:]
    caller = KeyPair.generate() if secure else None
    return [
        ReplicaProcess(
            raft[i],
            rpc[i],
            str(tmp_path / f"replica{i}"),
            raft,
            extra_args or [],
            secure=secure,
            caller=caller,
        )
        for i in range(n)
    ]


def client_options(replicas: list[ReplicaProcess]) -> dict:
    """RemoteLogStore's keyword arguments to call these (started) replicas: CURVE with the
    group's caller key and each replica's key when they are secure."""
    if not replicas[0].secure:
        return {}
    caller = replicas[0].caller
    assert caller is not None and all(r.caller == caller and r.public_key for r in replicas)
    return {
        "curve": ClientCurve(caller),
        "server_keys": {r.rpc_address: r.public_key for r in replicas},
    }


def remote(replicas: list[ReplicaProcess], **kw) -> RemoteLogStore:
    """A RemoteLogStore to these replicas, in this order (secure ones with CURVE)."""
    return RemoteLogStore([r.rpc_address for r in replicas], **client_options(replicas), **kw)


def write_credentials(path, replicas: list[ReplicaProcess], name: str = "operator") -> str:
    """A credentials file (0600) of the group's caller key whose entries are the replicas'
    RPC addresses and keys: what `logstore ... --credentials FILE` reads."""
    caller = replicas[0].caller
    assert caller is not None
    doc = credentials.document(
        name, "user", ["admin"], caller, [(r.rpc_address, r.public_key) for r in replicas]
    )
    credentials.write(path, doc)
    return str(path)
