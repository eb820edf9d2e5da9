"""The client's data path with CURVE end to end, real processes (design/security.md sections
2-5, design/client.md "Credentials"): a `coordinator start --curve` node with a bootstrap
admin key, a `tserver start --curve` admitted by the admin as the tserver principal named by
its UUID (`tserver show-key`, `coordinator users add UUID --kind tserver`), and users'
clients that reach the tablet server with the key the coordinator's locations give for the
UUID: a writer writes and scans, a reader scans and is refused a write (PERMISSION_DENIED from
the tablet server, nothing written), a client holding no key for the server gets nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from coordproc import Proc, wait_for

import logcentric
from logcentric import Column
from logcentric.tablets import TabletServerClient
from rpc import clusters, credentials
from rpc.addresses import free_port
from rpc.errors import PermissionDenied, RpcError, Unauthenticated
from rpc.keys import KeyPair
from tests.support.cli import REPO

pytestmark = pytest.mark.integration


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != credentials.CREDENTIALS_ENV}
    out = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out


def test_writer_writes_and_scans_reader_scans_only_over_curve(tmp_path, monkeypatch):
    # The clusters file's default names another cluster: the tools and the client given a
    # credentials file still talk to the coordinators it names (it was written for them).
    config = tmp_path / "clusters.toml"
    monkeypatch.setenv("LOGCENTRIC_CONFIG", str(config))
    clusters.register("elsewhere", [f"127.0.0.1:{free_port()}"], path=config)
    coord_dir = tmp_path / "c0"
    rpc, raft = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    node_key = json.loads(
        run("optools.coordinator_cli", "show-key", "--data-dir", str(coord_dir), "--json").stdout
    )["public_key"]
    admin = KeyPair.generate()
    (tmp_path / "admin.key").write_text(admin.public)
    admin_creds = tmp_path / "admin.credentials"
    credentials.write(
        admin_creds, credentials.document("admin", "user", ["admin"], admin, [(rpc, node_key)])
    )
    fs = tmp_path / "ts0"
    run("tservers.cli", "fs", "format", "--fs-root", str(fs))
    ts_id = json.loads(run("tservers.cli", "show-key", "--fs-root", str(fs), "--json").stdout)
    coordinator = Proc(
        ["-m", "optools.coordinator_cli", "start", "--id", "c0", "--data-dir", str(coord_dir),
         "--bind", rpc, "--raft", raft, "--insecure-dev", "--curve",
         "--admin-public-key", str(tmp_path / "admin.key"), "--tserver-timeout-s", "30"],
        tmp_path / "c0.log",
    )  # fmt: skip
    tserver = None
    try:
        wait_for(lambda: "bootstrap admin" in coordinator.text(), 90, "the bootstrap admin")
        coordinator_cli = ("optools.coordinator_cli", "--log-level", "WARNING")
        # The admin admits the tablet server by its UUID and key, and adds two users.
        run(*coordinator_cli, "users", "add", ts_id["uuid"], "--kind", "tserver",
            "--role", "server", "--public-key", str(fs / "keys" / "tserver.key"),
            "--credentials", str(admin_creds))  # fmt: skip
        for name, role in (("writer", "writer"), ("reader", "reader")):
            run(*coordinator_cli, "users", "add", name, "--role", role,
                "--out", str(tmp_path / f"{name}.credentials"),
                "--credentials", str(admin_creds))  # fmt: skip
        tserver = Proc(
            ["-m", "tservers.cli", "start", "--fs-root", str(fs), "--bind", "127.0.0.1:0",
             "--coordinators", rpc, "--curve", f"--coordinator-keys={node_key}"],
            tmp_path / "ts0.log",
        )  # fmt: skip

        def created() -> bool:
            try:
                with logcentric.connect(credentials=str(admin_creds), timeout_s=10) as client:
                    client.create_table(
                        "events",
                        [Column("id", "int64", key=True), Column("v", "string")],
                        num_tablets=2,
                        replication_factor=1,
                    )
                return True
            except RpcError as err:  # the server not enlisted yet
                assert "permission" not in str(err).lower(), err
                return False

        wait_for(created, 90, "CreateTable with the admitted CURVE tablet server")

        writer = str(tmp_path / "writer.credentials")
        with logcentric.connect(credentials=writer, timeout_s=30) as client:
            table = client.table("events")
            replicas = [r for t in table.tablets() for r in t.replicas]
            assert {r.public_key for r in replicas} == {ts_id["public_key"]}  # from locations
            with client.new_session() as session:
                session.upsert(table, [{"id": i, "v": f"v{i}"} for i in range(100)])
            assert session.errors == []
            got = table.to_arrow().sort_by("id")
            assert got["id"].to_pylist() == list(range(100))
            assert got["v"].to_pylist()[:2] == ["v0", "v1"]

        with logcentric.connect(
            credentials=str(tmp_path / "reader.credentials"), timeout_s=30
        ) as client:
            table = client.table("events")
            assert table.to_arrow().num_rows == 100  # a reader scans
            with pytest.raises(PermissionDenied, match="writer"):
                with client.new_session() as session:
                    session.upsert(table, [{"id": 1000, "v": "no"}])
        with logcentric.connect(credentials=writer, timeout_s=30) as client:
            assert client.table("events").to_arrow().num_rows == 100  # nothing written

        # `coordinator status` asks the tablet server itself over CURVE (the locations' key).
        status = json.loads(
            run(*coordinator_cli, "status", "--json", "--credentials", str(admin_creds)).stdout
        )
        assert [(s["uuid"], s["answered"]) for s in status["servers"]] == [(ts_id["uuid"], True)]

        # A client that has the right server key but no admitted key pair gets nothing.
        replica = replicas[0]
        with TabletServerClient(
            replica.address,
            replica.server_uuid,
            timeout_s=10,
            keypair=KeyPair.generate(),
            server_key=replica.public_key,
        ) as stranger:
            with pytest.raises(Unauthenticated, match="refused"):
                stranger.list_tablets()
    finally:
        if tserver is not None:
            tserver.stop()
        coordinator.stop()
