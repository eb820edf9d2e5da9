"""`coordinator local-cluster up` is secure by default (design/security.md sections 2, 4, 5;
issue 22): real processes, CURVE on every link. The admin's credentials file is made 0600,
every tablet server is admitted by its UUID and key and enlists, and the client library with
those credentials creates a table, writes and reads rows back through CURVE tablet servers;
a plaintext client gets nothing from a coordinator or a tablet server. `up --insecure` is
the only way to a plaintext cluster, and it says so loudly on stderr at every `up`."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pyarrow as pa
import pytest

import logcentric
from logcentric import Column
from logcentric.meta import CoordinatorClient
from optools.localcluster import ClusterSpec, LocalCluster
from rpc import clusters
from rpc.addresses import free_port
from rpc.client import RpcClient
from rpc.errors import RpcError
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration

WARNING = "WARNING: INSECURE cluster in"


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_local_cluster_up_is_secure_by_default(tmp_path, monkeypatch):
    root = tmp_path / "cluster"
    try:
        out = run_cli(
            "optools.localcluster", "up", "--dir", str(root),
            "--coordinators", "1", "--tservers", "2", "--lease-timeout-s", "1.0",
            "--no-register", "--json", "--timeout-s", "150",
            timeout_s=200,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        assert "WARNING" not in out.stderr, out.stderr
        up = json.loads(out.stdout)
        assert up["secure"] is True
        creds = up["credentials"]
        assert stat.S_IMODE(os.stat(creds).st_mode) == 0o600
        spec = ClusterSpec.load(root)
        assert spec is not None and spec.secure
        assert json.loads((root / "cluster.json").read_text())["secure"] is True
        for node in [*spec.coordinators, *spec.tservers]:
            args = _cmdline(node.pid)
            assert "--curve" in args and "--insecure" not in args, (node.name, args)
        status = LocalCluster(spec).status()
        assert status["healthy"], status
        # The clusters file's default names another cluster: the credentials file given to
        # connect() still names its own (it was written for it).
        config = tmp_path / "clusters.toml"
        monkeypatch.setenv("LOGCENTRIC_CONFIG", str(config))
        clusters.register("elsewhere", [f"127.0.0.1:{free_port()}"], path=config)
        assert clusters.load(config)["default"] == "elsewhere"
        with logcentric.connect(credentials=creds, timeout_s=30) as client:
            uuids = {s.uuid for s in client.meta.list_servers() if s.state == "LIVE"}
            assert len(uuids) == 2
            client.create_table(
                "events", [Column("k", "int64", key=True), Column("v", "string")],
                num_tablets=2, replication_factor=1,
            )  # fmt: skip
            table = client.table("events")
            session = client.new_session()
            session.insert(
                table, pa.table({"k": list(range(50)), "v": [f"r{i}" for i in range(50)]})
            )
            assert session.flush() == []
            got = table.to_arrow().sort_by("k")
            assert got.column("k").to_pylist() == list(range(50))
            assert got.column("v").to_pylist()[:2] == ["r0", "r1"]
        # No plaintext: a client without keys gets nothing from a coordinator (not even the
        # table list) nor a tablet server (not even a ping).
        with CoordinatorClient(spec.coordinator_addresses, timeout_s=5.0) as plain:
            with pytest.raises(RpcError):
                plain.list_tables()
        with RpcClient(spec.tservers[0].rpc, "plain") as plain, pytest.raises(RpcError):
            plain.ping(timeout_s=3.0)
        # The folder stays secure: `up` again (everything running) is ready at once, and
        # `--secure` (the default said explicitly) is still accepted.
        again = run_cli("optools.localcluster", "up", "--dir", str(root), "--no-register",
                        "--secure", "--json", timeout_s=200)  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["secure"] is True
        # A secure folder is not made plaintext in place.
        refused = run_cli("optools.localcluster", "up", "--dir", str(root), "--no-register",
                          "--insecure", timeout_s=200)  # fmt: skip
        assert refused.returncode != 0
        assert "holds a secure cluster" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr
    finally:
        spec = ClusterSpec.load(root)
        if spec is not None:
            LocalCluster(spec).down()


def test_local_cluster_up_insecure_warns_and_runs_plaintext(tmp_path):
    root = tmp_path / "cluster"
    try:
        out = run_cli(
            "optools.localcluster", "up", "--dir", str(root), "--insecure",
            "--coordinators", "1", "--tservers", "1", "--lease-timeout-s", "1.0",
            "--no-register", "--json", "--timeout-s", "150",
            timeout_s=200,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        warnings = [line for line in out.stderr.splitlines() if line.startswith(WARNING)]
        assert len(warnings) == 1, out.stderr
        assert "plaintext" in warnings[0] and "drop tables" in warnings[0]
        up = json.loads(out.stdout)  # the warning is on stderr: stdout is still one document
        assert up["secure"] is False and up["credentials"] is None
        assert json.loads((root / "cluster.json").read_text())["secure"] is False
        assert not (root / "admin.credentials").exists()
        spec = ClusterSpec.load(root)
        assert spec is not None and not spec.secure
        for node in [*spec.coordinators, *spec.tservers]:
            args = _cmdline(node.pid)
            assert "--insecure" in args and "--curve" not in args, (node.name, args)
        # Plaintext: a client without any key is served (which is what the warning says).
        with CoordinatorClient(spec.coordinator_addresses, timeout_s=30.0) as plain:
            assert plain.list_tables() == []
        with RpcClient(spec.tservers[0].rpc, "plain") as plain:
            plain.ping(timeout_s=10.0)
        # An existing plaintext folder stays plaintext, and says so again.
        again = run_cli("optools.localcluster", "up", "--dir", str(root), "--no-register",
                        "--json", timeout_s=200)  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["secure"] is False
        assert again.stderr.count(WARNING) == 1, again.stderr
        # --secure does not turn it into a secure one in place.
        refused = run_cli("optools.localcluster", "up", "--dir", str(root), "--no-register",
                          "--secure", timeout_s=200)  # fmt: skip
        assert refused.returncode != 0
        assert "holds a plaintext cluster" in refused.stderr, refused.stderr
    finally:
        spec = ClusterSpec.load(root)
        if spec is not None:
            LocalCluster(spec).down()
