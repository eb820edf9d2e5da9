"""The `coordinator` command: clear errors without tracebacks, and a one-node dev group."""

from __future__ import annotations

import subprocess

import pytest
from coordproc import Proc, free_port, wait_for

from logcentric.meta import CoordinatorClient
from rpc.errors import RpcError
from tests.support.cli import run_cli


def run(*args: str) -> subprocess.CompletedProcess:
    return run_cli("optools.coordinator_cli", *args, timeout_s=60)


def test_help():
    out = run("--help")
    assert out.returncode == 0 and "start" in out.stdout
    out = run("start", "--help")
    assert out.returncode == 0 and "--password-file" in out.stdout


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


@pytest.mark.integration
def test_single_node_development_group(tmp_path):
    rpc = f"127.0.0.1:{free_port()}"
    raft = f"127.0.0.1:{free_port()}"
    args = [
        "-m", "optools.coordinator_cli", "start", "--id", "dev",
        "--data-dir", str(tmp_path / "dev"),
        "--bind", rpc, "--raft", raft, "--insecure-dev",
    ]  # fmt: skip
    proc = Proc(args, tmp_path / "dev.log")
    try:
        with CoordinatorClient([rpc], timeout_s=30.0) as client:
            wait_for(lambda: _role(client, rpc) == "LEADER", 30, "the node leads")
            assert client.list_tables() == []
        out = run("status", "--coordinators", rpc)  # the ksck of optools/admin.py
        assert "LEADER" in out.stdout and rpc in out.stdout, out.stdout + out.stderr
        out = run("servers", "--coordinators", rpc)
        assert out.returncode == 0 and out.stdout == ""
        out = run("tables", "--coordinators", rpc)
        assert out.returncode == 0 and out.stdout == ""
    finally:
        proc.stop()
    assert proc.p.returncode == 0


def _role(client: CoordinatorClient, address: str) -> str:
    try:
        return client.status(address, timeout_s=0.5).role
    except RpcError:  # not up yet
        return ""
