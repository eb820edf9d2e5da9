"""One process per data dir: a second logstore replica or coordinator node started on a
live one's directory is refused before it touches a file, and the lock dies with its
holder (kill -9 included), so a restart after a crash is never refused."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from logstore.journal import decode_meta
from rpc.addresses import free_port
from tests.support.cli import REPO, run_cli
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration


def _start(argv: list[str], out: Path) -> subprocess.Popen:
    with open(out, "w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", *argv], cwd=REPO, stdout=f, stderr=subprocess.STDOUT
        )


def _files(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(30)


def _logstore_argv(d: Path) -> list[str]:
    raft = f"127.0.0.1:{free_port()}"
    # --insecure: a plaintext API (the test is about the data dir's lock, not keys).
    return ["logstore.cli", "serve", "--raft-address", raft, "--data-dir", str(d),
            "--insecure-dev", "--insecure"]  # fmt: skip


def _coordinator_argv(d: Path) -> list[str]:
    return ["optools.coordinator_cli", "start", "--id", "c0", "--data-dir", str(d),
            "--bind", f"127.0.0.1:{free_port()}", "--raft", f"127.0.0.1:{free_port()}",
            "--insecure-dev"]  # fmt: skip


def _rpc_of(out: Path, marker: str) -> str | None:
    """The rpc address a server printed on its `marker` line, once it has."""
    for line in out.read_text().splitlines():
        if line.startswith(marker):
            return line.split("rpc=", 1)[1].split()[0]
    return None


def _logstore_leads(out: Path) -> bool:
    rpc = _rpc_of(out, "logstore serving")
    status = run_cli("logstore.cli", "status", "--servers", rpc) if rpc else None
    return status is not None and "role=leader" in status.stdout


def _coordinator_leads(out: Path) -> bool:
    """CURVE (the default): asked as the bootstrap admin, whose credentials the node writes
    to its data dir (`node`, beside `out`) when it first leads; for the node's address now
    (a restart binds another port) with the node's key."""
    from logcentric.meta import CoordinatorClient
    from rpc import credentials, keys
    from rpc.errors import RpcError

    rpc = _rpc_of(out, "coordinator c0 uuid=")
    d = out.parent / "node"
    path = d / "admin.credentials"
    if rpc is None or not path.exists():
        return False
    admin = credentials.load(path)
    node_key = keys.load_public_key(d / "keys" / "coordinator.key")
    creds = credentials.Credentials(
        admin.name, admin.kind, admin.roles, admin.keypair, ((rpc, node_key),)
    )
    try:
        with CoordinatorClient([rpc], timeout_s=5.0, credentials=creds) as client:
            return client.status(rpc, timeout_s=2.0).role == "LEADER"
    except RpcError:
        return False


def _wait_leading(proc: subprocess.Popen, out: Path, leads) -> None:
    """Until `proc` leads its single-node group; fails at once, with its output, if it exits."""
    wait_for(lambda: proc.poll() is not None or leads(out), 60, f"{out.stem} leading")
    assert proc.poll() is None, out.read_text()


@pytest.mark.parametrize(
    "argv_of,leads,holder",
    [
        (_logstore_argv, _logstore_leads, "logstore"),
        (_coordinator_argv, _coordinator_leads, "coordinator c0"),
    ],
    ids=["logstore", "coordinator"],
)
def test_a_second_process_on_a_live_data_dir_is_refused(tmp_path, argv_of, leads, holder):
    d = tmp_path / "node"
    first = _start(argv_of(d), tmp_path / "first.out")
    try:
        # Settled: it leads, its term and vote written (they change no more on their own).
        _wait_leading(first, tmp_path / "first.out", leads)
        before = _files(d)
        out = run_cli(*argv_of(d))
        assert out.returncode == 1, (out.returncode, out.stderr)
        last = out.stderr.strip().splitlines()[-1]
        assert "in use by another process" in last and f"{first.pid} {holder}" in last, last
        assert "Traceback" not in out.stderr
        # Refused before touching anything: the live one's term, vote and identity are as
        # they were (its journal and commit index grow on their own: lease renewals).
        after = _files(d)
        meta = next(n for n in ("logstore/journal.meta", "journal.meta") if n in before)
        term_vote = [(t, v) for t, _, v in map(decode_meta, (before[meta], after[meta]))]
        assert term_vote[0] == term_vote[1]
        for name in ("coordinator-uuid", "uuid"):
            if name in before:
                assert after[name] == before[name], name
        # kill -9 of the holder: the lock goes with it, the restart is not refused.
        _stop(first, signal.SIGKILL)
        second = _start(argv_of(d), tmp_path / "second.out")
        try:
            _wait_leading(second, tmp_path / "second.out", leads)
        finally:
            _stop(second)
    finally:
        _stop(first, signal.SIGKILL)
