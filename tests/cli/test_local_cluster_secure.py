"""`coordinator local-cluster up --secure` end to end (design/security.md sections 2, 4, 5):
real processes, CURVE on every link. The admin's credentials file is made 0600, every tablet
server is admitted by its UUID and key and enlists, and the client library with those
credentials creates a table, writes and reads rows back through CURVE tablet servers; a
plaintext client gets nothing from a tablet server."""

from __future__ import annotations

import json
import os
import stat

import pyarrow as pa
import pytest

import logcentric
from logcentric import Column
from optools.localcluster import ClusterSpec, LocalCluster
from rpc import clusters
from rpc.addresses import free_port
from rpc.client import RpcClient
from rpc.errors import RpcError
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration


def test_local_cluster_up_secure(tmp_path, monkeypatch):
    root = tmp_path / "cluster"
    try:
        out = run_cli(
            "optools.localcluster", "up", "--dir", str(root), "--secure",
            "--coordinators", "1", "--tservers", "2", "--lease-timeout-s", "1.0",
            "--no-register", "--json", "--timeout-s", "150",
            timeout_s=200,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
        up = json.loads(out.stdout)
        assert up["secure"] is True
        creds = up["credentials"]
        assert stat.S_IMODE(os.stat(creds).st_mode) == 0o600
        spec = ClusterSpec.load(root)
        assert spec is not None and spec.secure
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
        # No plaintext: a client without keys gets no answer from a tablet server.
        with RpcClient(spec.tservers[0].rpc, "plain") as plain, pytest.raises(RpcError):
            plain.ping(timeout_s=3.0)
        # The folder stays secure: `up` again (everything running) is ready at once.
        again = run_cli("optools.localcluster", "up", "--dir", str(root), "--no-register",
                        "--json", timeout_s=200)  # fmt: skip
        assert again.returncode == 0, again.stdout + again.stderr
        assert json.loads(again.stdout)["secure"] is True
    finally:
        spec = ClusterSpec.load(root)
        if spec is not None:
            LocalCluster(spec).down()
