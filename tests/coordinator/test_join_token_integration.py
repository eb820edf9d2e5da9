"""One-use join tokens with real processes (design/security.md section 5): a `coordinator
start --curve` node with a bootstrap admin key and `tserver start --curve` processes.

- a non-admin cannot make a token (PERMISSION_DENIED, nothing logged);
- `coordinator join-token` as the admin; a tablet server started with it (--join-token) is
  admitted by its UUID and own key, enlists, and serves a writer's rows;
- the same token given to a second server ($LOGCENTRIC_JOIN_TOKEN) is refused, and nothing
  changes; an expired token is refused; a server with neither token nor admission is never
  enlisted;
- `users list` shows tokens (kind, deadline, unused/expired) and how a server joined, without
  secrets; `coordinator log` decodes the records; no log holds the token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from coordproc import Proc, wait_for

import logcentric
from logcentric import Column
from rpc import credentials
from rpc.addresses import free_port
from rpc.errors import RpcError
from rpc.keys import KeyPair
from tests.support.cli import REPO

pytestmark = pytest.mark.integration

WAIT_S = 90.0
TIMEOUT_S = "20"


def cli(*args: str, creds=None) -> subprocess.CompletedProcess:
    extra = ["--credentials", str(creds)] if creds is not None else []
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in (credentials.CREDENTIALS_ENV, "LOGCENTRIC_JOIN_TOKEN")
    }
    return subprocess.run(
        [sys.executable, "-m", *args, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def ok(out: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert out.returncode == 0, (out.args, out.stdout, out.stderr)
    return out


def test_join_tokens_admit_one_server_once(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGCENTRIC_CONFIG", str(tmp_path / "clusters.toml"))
    coord_dir = tmp_path / "c0"
    rpc, raft = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    coordinator_cli = ("optools.coordinator_cli", "--log-level", "WARNING")
    node_key = json.loads(
        ok(cli(*coordinator_cli, "show-key", "--data-dir", str(coord_dir), "--json")).stdout
    )["public_key"]
    admin = KeyPair.generate()
    (tmp_path / "admin.key").write_text(admin.public)
    admin_creds = tmp_path / "admin.credentials"
    credentials.write(
        admin_creds, credentials.document("admin", "user", ["admin"], admin, [(rpc, node_key)])
    )
    roots = {}
    for name in ("joined", "second", "expired", "stranger"):
        root = tmp_path / name
        ok(cli("tservers.cli", "fs", "format", "--fs-root", str(root)))
        roots[name] = json.loads(
            ok(cli("tservers.cli", "show-key", "--fs-root", str(root), "--json")).stdout
        )
    coordinator = Proc(
        ["-m", "optools.coordinator_cli", "start", "--id", "c0", "--data-dir", str(coord_dir),
         "--bind", rpc, "--raft", raft, "--insecure-dev", "--curve",
         "--admin-public-key", str(tmp_path / "admin.key"), "--tserver-timeout-s", "30"],
        tmp_path / "c0.log",
    )  # fmt: skip
    servers: dict[str, Proc] = {}

    def start(name: str, token: str | None = None, env_token: str | None = None) -> Proc:
        args = ["-m", "tservers.cli", "start", "--fs-root", str(tmp_path / name),
                "--bind", "127.0.0.1:0", "--coordinators", rpc, "--curve",
                f"--coordinator-keys={node_key}"]  # fmt: skip
        if token is not None:
            args += ["--join-token", token]
        env = {"LOGCENTRIC_JOIN_TOKEN": env_token or ""}
        servers[name] = Proc(args, tmp_path / f"{name}.log", env=env)
        return servers[name]

    def principals() -> dict[str, dict]:
        out = ok(cli(*coordinator_cli, "users", "list", "--json", "--coordinators", rpc,
                     "--timeout-s", TIMEOUT_S, creds=admin_creds))  # fmt: skip
        return {p["name"]: p for p in json.loads(out.stdout)}

    def enlisted() -> set[str]:
        out = ok(cli(*coordinator_cli, "servers", "--json", "--coordinators", rpc,
                     creds=admin_creds))  # fmt: skip
        return {s["uuid"] for s in json.loads(out.stdout)}

    def make_token(ttl_s: int) -> dict:
        out = ok(cli(*coordinator_cli, "join-token", "--ttl-s", str(ttl_s), "--json",
                     "--coordinators", rpc, "--timeout-s", TIMEOUT_S,
                     creds=admin_creds))  # fmt: skip
        return json.loads(out.stdout)

    try:
        wait_for(lambda: "bootstrap admin" in coordinator.text(), WAIT_S, "the bootstrap admin")
        ok(cli(*coordinator_cli, "users", "add", "writer", "--role", "writer",
               "--out", str(tmp_path / "writer.credentials"), "--coordinators", rpc,
               creds=admin_creds))  # fmt: skip

        # A non-admin cannot make a token: PERMISSION_DENIED in one line, nothing logged.
        before = principals()
        out = cli(*coordinator_cli, "join-token", "--coordinators", rpc, "--timeout-s",
                  TIMEOUT_S, creds=tmp_path / "writer.credentials")  # fmt: skip
        text = out.stderr.strip()
        assert out.returncode != 0 and "Traceback" not in text, text
        assert "permission denied" in text.lower() and "admin role" in text, text
        assert out.stdout == ""  # no token printed
        assert principals() == before

        # The admin makes a token; the list shows it unused, with its deadline, no secret.
        token = make_token(600)
        assert token["token"].startswith("lcjt1.") and token["name"].startswith("join-")
        listed = principals()[token["name"]]
        assert (listed["kind"], listed["roles"], listed["state"], listed["expired"]) == (
            "join-token",
            ["join"],
            "active",
            False,
        )
        assert listed["expires_unix_ms"] == token["expires_unix_ms"] > 0
        assert listed["public_key"] == token["public_key"]
        secret = token["token"].removeprefix("lcjt1.")
        assert secret not in json.dumps(principals())

        # A server started with it is admitted by its own UUID and key, enlists and serves.
        joined = roots["joined"]
        start("joined", token=token["token"])
        wait_for(lambda: joined["uuid"] in enlisted(), WAIT_S, "the joined server enlisted")
        listed = principals()
        assert token["name"] not in listed  # spent: no longer a principal
        ts = listed[joined["uuid"]]
        assert (ts["kind"], ts["roles"], ts["state"], ts["public_key"], ts["join_token"]) == (
            "tserver",
            ["server"],
            "active",
            joined["public_key"],
            token["name"],
        )
        with logcentric.connect(credentials=str(admin_creds), timeout_s=30) as client:
            client.create_table(
                "events",
                [Column("id", "int64", key=True), Column("v", "string")],
                num_tablets=1,
                replication_factor=1,
            )
        with logcentric.connect(
            credentials=str(tmp_path / "writer.credentials"), timeout_s=30
        ) as client:
            table = client.table("events")
            with client.new_session() as session:
                session.upsert(table, [{"id": i, "v": f"v{i}"} for i in range(20)])
            assert session.errors == []
            assert table.to_arrow().sort_by("id")["id"].to_pylist() == list(range(20))

        # The same token, a second server (through the environment): refused, nothing changes.
        before = principals()
        second = start("second", env_token=token["token"])
        wait_for(
            lambda: "joining with the join token" in second.text(),
            WAIT_S,
            "the second server's join refused",
        )
        assert "spent, revoked or unknown" in second.text()  # its key refused at the handshake
        assert second.alive()

        # An expired token: refused (the leader's wall clock against the logged deadline).
        short = make_token(1)
        wait_for(lambda: principals()[short["name"]]["expired"], WAIT_S, "the 1 s token expired")
        expired = start("expired", token=short["token"])
        wait_for(lambda: "expired at" in expired.text(), WAIT_S, "the expired token's refusal")
        assert principals()[short["name"]]["state"] == "active"  # refused: not spent either

        # Neither token nor admission: its heartbeats are refused at the handshake.
        stranger = start("stranger")
        wait_for(
            lambda: "heartbeat to" in stranger.text() and "refused" in stranger.text(),
            WAIT_S,
            "the stranger's heartbeats refused",
        )
        after = principals()
        del after[short["name"]]
        assert after == before
        assert enlisted() == {joined["uuid"]}
        for name in ("second", "expired", "stranger"):
            assert roots[name]["uuid"] not in after

        # `coordinator log` decodes the records: the token's add (public key, deadline) and
        # the join that spent it; no log of any process holds a token's secret.
        log = ok(cli(*coordinator_cli, "log", "--coordinators", rpc, "--timeout-s",
                     TIMEOUT_S, creds=admin_creds))  # fmt: skip
        assert f"join principal={joined['uuid']} kind=tserver" in log.stdout
        assert f"join_token={token['name']}" in log.stdout
        assert f"principal={short['name']} kind=join-token key={short['public_key']}" in (
            log.stdout
        )
        assert "expires=" in log.stdout
        short_secret = short["token"].removeprefix("lcjt1.")
        texts = [log.stdout, coordinator.text(), *(p.text() for p in servers.values())]
        for text in texts:
            assert secret not in text and short_secret not in text
    except RpcError as err:  # pragma: no cover - shown with the processes' logs
        raise AssertionError(f"{err}\n{coordinator.text()[-4000:]}") from err
    finally:
        for proc in servers.values():
            proc.stop()
        coordinator.stop()
