"""The `coordinator` command: clear errors without tracebacks, and a one-node dev group."""

from __future__ import annotations

import json
import subprocess

import pytest
from coordproc import Proc, free_port, wait_for

from logcentric.meta import CoordinatorClient
from rpc import credentials
from rpc.errors import RpcError
from rpc.keys import KeyPair
from tests.support.cli import run_cli


def run(*args: str) -> subprocess.CompletedProcess:
    return run_cli("optools.coordinator_cli", *args, timeout_s=60)


def test_help():
    out = run("--help")
    assert out.returncode == 0 and "start" in out.stdout
    out = run("start", "--help")
    assert out.returncode == 0 and "--password-file" in out.stdout
    text = " ".join(out.stdout.split())  # argparse wraps the help
    assert "--insecure" in text and "CURVE on the client RPC service, the default" in text


def test_operating_errors_are_clear(tmp_path):
    out = run("start", "--id", "x", "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2 and "--raft" in out.stderr and "Traceback" not in out.stderr
    # No password and not asked for an insecure development node: refused.
    out = run("start", "--id", "x", "--data-dir", str(tmp_path / "d"), "--raft", "127.0.0.1:1")
    assert out.returncode == 1 and "password" in out.stderr and "Traceback" not in out.stderr
    out = run(
        "start", "--id", "x", "--data-dir", str(tmp_path / "d"), "--raft", "127.0.0.1:1",
        "--password-file", str(tmp_path / "missing"),
    )  # fmt: skip
    assert out.returncode == 1 and "password file" in out.stderr and "Traceback" not in out.stderr


def _dev_node(tmp_path, *flags: str) -> tuple[Proc, str]:
    rpc = f"127.0.0.1:{free_port()}"
    raft = f"127.0.0.1:{free_port()}"
    args = [
        "-m", "optools.coordinator_cli", "start", "--id", "dev",
        "--data-dir", str(tmp_path / "dev"),
        "--bind", rpc, "--raft", raft, "--insecure-dev", *flags,
    ]  # fmt: skip
    return Proc(args, tmp_path / "dev.log"), rpc


def _start_line(proc: Proc) -> str:
    def line() -> str:
        found = next((ln for ln in proc.text().splitlines() if " rpc=" in ln), "")
        if not found and not proc.alive():
            raise AssertionError(proc.text())
        return found

    return wait_for(line, 60, "the start line")


@pytest.mark.integration
def test_single_node_development_group_is_curve_by_default(tmp_path):
    """No flag: CURVE (design/security.md). The node's key is in its start line, a
    plaintext client gets nothing, and the admin's credentials it writes work."""
    proc, rpc = _dev_node(tmp_path)
    try:
        line = _start_line(proc)
        key = credentials_key(tmp_path / "dev")
        assert f"curve-key={key}" in line and "plaintext" not in line, line
        assert "INSECURE" not in proc.text()
        # A plaintext client: refused at the handshake, well before its deadline.
        with CoordinatorClient([rpc], timeout_s=10.0) as plain:
            with pytest.raises(RpcError):
                plain.status(rpc, timeout_s=10.0)
        path = tmp_path / "dev" / "admin.credentials"
        wait_for(lambda: path.exists() and "logged" in proc.text(), 60, "the bootstrap admin")
        creds = credentials.load(path)
        with CoordinatorClient([rpc], timeout_s=30.0, credentials=creds) as client:
            wait_for(lambda: _role(client, rpc) == "LEADER", 30, "the node leads")
            assert client.list_tables() == []
        c = ("--coordinators", rpc, "--credentials", str(path))
        out = run("status", *c)  # the ksck of optools/admin.py
        assert "LEADER" in out.stdout and rpc in out.stdout, out.stdout + out.stderr
        assert "INSECURE" not in out.stdout
        doc = json.loads(run("status", "--json", *c).stdout)
        assert doc["secure"] is True and [n["secure"] for n in doc["nodes"]] == [True]
        out = run("servers", *c)
        assert out.returncode == 0 and out.stdout == ""
        out = run("tables", *c)
        assert out.returncode == 0 and out.stdout == ""
    finally:
        proc.stop()
    assert proc.p.returncode == 0


@pytest.mark.integration
def test_insecure_node_is_loud_in_its_log_and_in_status(tmp_path):
    """--insecure: plaintext and unauthenticated, said in a WARNING at start and in the
    start line, and `coordinator status` names the node as insecure (text and --json)."""
    proc, rpc = _dev_node(tmp_path, "--insecure")
    try:
        line = _start_line(proc)
        assert "INSECURE plaintext" in line and "curve-key" not in line, line
        warning = [ln for ln in proc.text().splitlines() if "WARNING" in ln and "INSECURE" in ln]
        assert len(warning) == 1 and "unauthenticated" in warning[0], proc.text()
        assert "drop tables" in warning[0] and rpc in warning[0], warning
        with CoordinatorClient([rpc], timeout_s=30.0) as client:  # plaintext answers
            wait_for(lambda: _role(client, rpc) == "LEADER", 30, "the node leads")
        out = run("status", "--coordinators", rpc)
        assert out.returncode == 0, out.stdout + out.stderr
        loud = [ln for ln in out.stdout.splitlines() if "INSECURE" in ln]
        assert len(loud) == 1 and rpc in loud[0] and "unauthenticated" in loud[0], out.stdout
        doc = json.loads(run("status", "--json", "--coordinators", rpc).stdout)
        assert doc["secure"] is False
        assert [(n["address"], n["secure"], n["public_key"]) for n in doc["nodes"]] == [
            (rpc, False, "")
        ]
    finally:
        proc.stop()
    assert proc.p.returncode == 0


def test_insecure_and_curve_exclude_each_other_and_admin_key_needs_curve(tmp_path):
    base = ("start", "--id", "x", "--data-dir", str(tmp_path / "d"), "--raft", "127.0.0.1:1",
            "--insecure-dev")  # fmt: skip
    out = run(*base, "--insecure", "--curve")
    assert out.returncode == 2 and "exclude each other" in out.stderr, out.stderr
    key = tmp_path / "admin.key"
    key.write_text(KeyPair.generate().public + "\n")
    out = run(*base, "--insecure", "--admin-public-key", str(key))
    assert out.returncode == 2 and "--admin-public-key needs CURVE" in out.stderr, out.stderr
    assert not (tmp_path / "d").exists()


def credentials_key(data_dir) -> str:
    """The node's public key, from its data dir (`coordinator show-key`)."""
    out = run("show-key", "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _role(client: CoordinatorClient, address: str) -> str:
    try:
        return client.status(address, timeout_s=0.5).role
    except RpcError:  # not up yet
        return ""
