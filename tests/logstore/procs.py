"""`logstore serve` replicas as real processes for integration tests and the bench."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

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
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
        log.close()
        line = _read_line(self.proc, timeout_s)
        if not line.startswith("logstore serving"):
            self.kill()
            raise RuntimeError(f"replica {self.raft_address} did not start: {line!r}")
        fields = dict(part.split("=", 1) for part in line.split()[2:])
        self.uuid = fields["uuid"]
        assert fields["rpc"] == self.rpc_address, fields

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


def make_replicas(tmp_path, n: int, extra_args: list[str] | None = None) -> list[ReplicaProcess]:
    addrs = free_addresses(2 * n)
    raft, rpc = addrs[:n], addrs[n:]
    return [
        ReplicaProcess(raft[i], rpc[i], str(tmp_path / f"replica{i}"), raft, extra_args or [])
        for i in range(n)
    ]
