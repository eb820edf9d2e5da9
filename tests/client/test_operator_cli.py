"""The operator commands as a user runs them: local-cluster up/status/down, status (ksck),
tables, create-table, describe, drop-table, log --summary, with real processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from optools.localcluster import ClusterSpec

pytestmark = pytest.mark.integration


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_operator_session(tmp_path):
    root = tmp_path / "cluster"
    up = cli("local-cluster", "up", "--dir", str(root), "--coordinators", "3", "--tservers", "2")
    coordinators = next(
        line.split(" ", 1)[1] for line in up.stdout.splitlines() if line.startswith("coordinators:")
    )
    try:
        assert cli("local-cluster", "status", "--dir", str(root)).stdout.count(" up ") == 5
        # A new cluster is secure: every command acts as the admin of its credentials file.
        c = ["--coordinators", coordinators, "--credentials", str(root / "admin.credentials")]
        cli("create-table", "people", *c, "--columns", "id:int64:key,name:string:nullable",
            "--tablets", "3")  # fmt: skip
        assert "people" in cli("tables", *c).stdout
        described = json.loads(cli("describe", "people", *c, "--json").stdout)
        assert [col["name"] for col in described["columns"]] == ["id", "name"]
        assert len(described["tablets"]) == 3
        bad = cli("create-table", "people", *c, "--columns", "id:int64:key", check=1)
        assert "ALREADY_EXISTS" in bad.stderr
        bad = cli("create-table", "x", *c, "--columns", "id:float:key", check=1)
        assert "TYPE one of" in bad.stderr
        spec_now = ClusterSpec.load(root)
        healthy = json.loads(cli("status", *c, "--json").stdout)
        assert healthy["healthy"] and healthy["leader"]
        # --json on the commands that change things: one object on stdout.
        made = json.loads(
            cli("create-table", "j", *c, "--columns", "id:int64:key", "--json").stdout
        )
        assert made["name"] == "j" and made["table_id"].startswith("t"), made
        gone = json.loads(cli("drop-table", "j", *c, "--json").stdout)
        assert gone == made, (gone, made)
        listed = json.loads(cli("servers", *c, "--json").stdout)
        assert sorted(s["address"] for s in listed) == sorted(n.rpc for n in spec_now.tservers)
        assert all(s["state"] == "LIVE" and not s["retired"] for s in listed), listed
        # A tablet server's address given as a coordinator's: the admin's file has no key
        # for it, so nothing is sent, and the error says what to do.
        ts_address = spec_now.tservers[0].rpc
        wrong = cli("replication", "--coordinators", ts_address, *c[2:], check=1)
        assert f"has no public key for coordinator {ts_address}" in wrong.stderr, wrong.stderr
        # A reader that goes away (`coordinator status | head -1`): a quiet exit 0.
        for command in (["status", *c], ["tables", *c]):
            proc = subprocess.Popen(
                [sys.executable, "-m", "optools.coordinator_cli", *command],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            proc.stdout.close()  # before the command writes anything: no reader is left
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, (command, err)
            assert "Traceback" not in err and "Exception ignored" not in err, err
        assert sum(len(t["tablets"]) for t in healthy["tables"]) == 3

        # A dead tablet server makes the cluster unhealthy: exit status 1, and why.
        spec = ClusterSpec.load(root)
        victim = spec.tservers[0]
        os.kill(victim.pid, signal.SIGKILL)
        sick = cli("status", *c, check=1)
        assert "UNHEALTHY" in sick.stdout and victim.rpc in sick.stdout
        # Factor 2 on 2 servers: every tablet lost its majority, and status says so.
        assert "UNAVAILABLE: 1 of its 2 voters running, not a majority" in sick.stdout
        # `up` again, without counts: the cluster in --dir restarts what is down, as it is.
        again = cli("local-cluster", "up", "--dir", str(root))
        assert f"coordinators: {coordinators}" in again.stdout
        assert cli("local-cluster", "status", "--dir", str(root)).stdout.count(" up ") == 5
        other = cli("local-cluster", "up", "--dir", str(root), "--tservers", "3", check=1)
        assert "holds a cluster of 3 coordinator(s) and 2 tablet server(s)" in other.stderr

        summary = cli("log", "--data-dir", spec.coordinators[0].data, "--summary")
        assert "create_table" in summary.stdout
        cli("drop-table", "people", *c)
        assert "people" not in cli("tables", *c).stdout
    finally:
        cli("local-cluster", "down", "--dir", str(root), check=None)
    down = cli("local-cluster", "status", "--dir", str(root), check=1)
    assert down.stdout.count("DOWN") == 5


def test_the_wrong_kind_of_server_is_named(tmp_path):
    """A tablet server's address given to a coordinator command, and a coordinator's to a
    tserver command: said so, not an unknown rpc method. Plaintext on purpose: the answer
    that names the kind of server needs a connection, and with CURVE a client without the
    server's key never gets one (test_operator_session checks that refusal)."""
    root = tmp_path / "cluster"
    up = cli("local-cluster", "up", "--dir", str(root), "--coordinators", "1", "--tservers", "1",
             "--insecure", "--no-register")  # fmt: skip
    assert "WARNING: INSECURE cluster" in up.stderr, up.stderr
    try:
        spec = ClusterSpec.load(root)
        wrong = cli("replication", "--coordinators", spec.tservers[0].rpc, check=1)
        assert "is a tserver server, not a coordinator node" in wrong.stderr, wrong.stderr
        wrong = subprocess.run(
            [sys.executable, "-m", "tservers.cli", "copies",
             "--address", spec.coordinators[0].rpc],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert wrong.returncode == 1 and "is a coordinator server, not a tserver" in wrong.stderr
    finally:
        cli("local-cluster", "down", "--dir", str(root), check=None)
