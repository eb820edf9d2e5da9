"""Clients and tools with credentials against CURVE coordinator groups run by
`coordinator start --curve` (design/security.md sections 2, 3 and 5; design/client.md
"Credentials"): the bootstrap admin (a key given to every node, or a credentials file the
first leader makes), `coordinator users add` writing the coordinators' keys, a reader
refused DDL with PERMISSION_DENIED and nothing changed, and the clear, fast refusals: no
credentials, an unknown key, a revoked key at its next call, a wrong coordinator key, a
credentials file others may read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from coordproc import CoordinatorGroup, Proc, wait_for

import logcentric
from logcentric import Column
from rpc import clusters, credentials
from rpc.addresses import free_port
from rpc.errors import PermissionDenied, RpcError, Unauthenticated
from rpc.keys import KeyPair
from rpc.protocols import coordinator_pb2 as pb
from tests.support.cli import REPO

pytestmark = pytest.mark.integration

TIMEOUT_S = "20"  # per CLI call: a refusal must come well before it


def cli(*args: str, creds=None, env=None) -> subprocess.CompletedProcess:
    extra = ["--credentials", str(creds)] if creds is not None else []
    full_env = {k: v for k, v in os.environ.items() if k != credentials.CREDENTIALS_ENV}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", *args, *extra],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=full_env,
    )


def ok_json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, (out.stdout, out.stderr)
    return json.loads(out.stdout)


def refused(out: subprocess.CompletedProcess, *words: str) -> str:
    text = out.stderr.strip()
    assert out.returncode != 0, (out.stdout, text)
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for word in words:
        assert word.lower() in text.lower(), text
    return text


def node_keys(group: CoordinatorGroup) -> list[str]:
    """Each node's public key, made before its first start (the group makes the pairs as
    `coordinator show-key` would; show-key reads them)."""
    out = []
    for i in range(len(group.rpc)):
        doc = ok_json(cli("show-key", "--data-dir", str(group.root / f"c{i}"), "--json"))
        assert doc["made"] is False and doc["public_key"] == group.node_keys[i]
        out.append(doc["public_key"])
    return out


def write_creds(path, name: str, keypair: KeyPair, coordinators) -> str:
    credentials.write(path, credentials.document(name, "user", ["admin"], keypair, coordinators))
    return str(path)


def admin_key_of(path) -> str:
    return credentials.load(path).keypair.public


def table_names(creds_path: str, addresses) -> list[str]:
    with logcentric.connect(addresses, credentials=creds_path, timeout_s=20) as client:
        return client.list_tables()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three `coordinator start` processes (CURVE, the default; the group passes --curve
    and --admin-public-key); the admin's key given to every node."""
    root = tmp_path_factory.mktemp("curve-group")
    group = CoordinatorGroup(root)
    keys = node_keys(group)
    admin = group.credentials.keypair
    admin_creds = str(group.admin_credentials_file)
    for i in range(3):
        group.start(i)
    try:
        group.wait_started()
        for i, p in enumerate(group.procs):  # the start line names the node's key
            assert f"curve-key={keys[i]}" in p.text(), p.text()

        def admin_logged():
            try:
                with logcentric.connect(group.rpc, credentials=admin_creds, timeout_s=5) as c:
                    answer = c.meta.call(
                        "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse
                    )
                return [(p.name, p.public_key, list(p.roles), p.pending) for p in answer.principals]
            except RpcError:
                return None

        assert wait_for(admin_logged, 90, "the bootstrap admin logged") == [
            ("admin", admin.public, ["admin"], False)
        ]
        yield group, keys, admin_creds, root
    finally:
        group.close()


def test_users_add_writes_the_coordinators_keys_and_a_reader_may_read_but_not_ddl(cluster):
    group, keys, admin_creds, root = cluster
    addresses = ",".join(group.rpc)
    # status --json names every node's key; the admin lists itself
    status = json.loads(
        cli("status", "--coordinators", addresses, "--json", creds=admin_creds).stdout
    )
    assert sorted(n["public_key"] for n in status["nodes"]) == sorted(keys)
    listed = ok_json(cli("users", "list", "--coordinators", addresses, "--json", creds=admin_creds))
    assert [(p["name"], p["roles"]) for p in listed] == [("admin", ["admin"])]
    # The bootstrap admin is a record of the log: `coordinator log` reads it live, over CURVE.
    log = cli("log", "--coordinators", addresses, "--json", "--timeout-s", TIMEOUT_S,
              creds=admin_creds)  # fmt: skip
    assert log.returncode == 0, log.stderr
    assert "principal" in log.stdout and admin_key_of(admin_creds) in log.stdout

    reader_path = root / "reader.credentials"
    added = ok_json(
        cli("users", "add", "reader", "--role", "reader", "--out", str(reader_path),
            "--coordinators", addresses, "--json", creds=admin_creds)
    )  # fmt: skip
    assert added["credentials_file"] == str(reader_path)
    assert stat.S_IMODE(os.stat(reader_path).st_mode) == 0o600
    reader = credentials.load(reader_path)
    assert reader.name == "reader" and reader.roles == ("reader",)
    assert reader.coordinators == tuple(zip(group.rpc, keys, strict=True))  # addresses AND keys

    # The reader's client names no address: the file's coordinators are used.
    with logcentric.connect(credentials=str(reader_path), timeout_s=20) as client:
        assert client.list_tables() == []
        with pytest.raises(logcentric.NotFound):  # authorized: the table just is not there
            client.describe_table("nope")
        t0 = time.monotonic()
        with pytest.raises(PermissionDenied, match="needs the admin role; the caller has reader"):
            client.create_table("t", [Column("k", "int64", key=True)], num_tablets=1)
        with pytest.raises(PermissionDenied, match="DropTable needs the admin role"):
            client.drop_table("nope")
        assert time.monotonic() - t0 < 10  # refused at once, not retried to the deadline
        assert client.list_tables() == []  # nothing changed
    # the same through the CLIs, one line each
    refused(
        cli("create-table", "t", "--columns", "k:int64:key", "--coordinators", addresses,
            "--timeout-s", TIMEOUT_S, creds=reader_path),
        "permission denied", "admin",
    )  # fmt: skip
    refused(
        cli("users", "add", "mallory", "--role", "admin", "--coordinators", addresses,
            "--out", str(root / "mallory.credentials"), creds=reader_path),
        "permission denied",
    )  # fmt: skip
    assert not (root / "mallory.credentials").exists()  # a refused add keeps no secret
    refused(
        cli("log", "--coordinators", addresses, "--timeout-s", TIMEOUT_S, creds=reader_path),
        "LogStore",
        "admin",
    )  # the log is the admin's to read
    assert cli("tables", "--coordinators", addresses, "--json", creds=reader_path).returncode == 0

    # A clusters-file entry names the credentials: `--cluster NAME` alone uses the reader's.
    config = root / "clusters.toml"
    clusters.register("secure", group.rpc, credentials=str(reader_path), path=config)
    env = {clusters.CONFIG_ENV: str(config)}
    assert cli("tables", "--cluster", "secure", "--json", env=env).returncode == 0
    refused(
        cli("drop-table", "nope", "--cluster", "secure", "--timeout-s", TIMEOUT_S, env=env),
        "DropTable needs the admin role; the caller has reader",
    )

    # The Spark data source's option "credentials", resolved on the driver.
    pytest.importorskip("pyspark")
    from logcentric.spark import datasource, mapping

    options = datasource._resolve_cluster(
        mapping.parse_options(
            {"coordinators": addresses, "table": "t", "credentials": str(reader_path)}
        )
    )
    assert options.credentials == str(reader_path)
    with datasource._open_client(options) as client:
        assert client.credentials.name == "reader" and client.list_tables() == []


def test_no_credentials_unknown_key_wrong_server_key_and_loose_file_fail_clearly(cluster):
    group, keys, admin_creds, root = cluster
    addresses = ",".join(group.rpc)
    # no credentials at all: a plaintext client of a CURVE node
    t0 = time.monotonic()
    text = refused(cli("tables", "--coordinators", addresses, "--timeout-s", TIMEOUT_S))
    assert "curve" in text.lower(), text
    assert time.monotonic() - t0 < 15, "a plaintext client must not wait for the deadline"

    # a key pair the cluster never admitted
    stranger = write_creds(
        root / "stranger.credentials",
        "stranger",
        KeyPair.generate(),
        zip(group.rpc, keys, strict=True),
    )
    t0 = time.monotonic()
    with pytest.raises(Unauthenticated, match="refused"):
        table_names(stranger, group.rpc)
    assert time.monotonic() - t0 < 10
    refused(cli("tables", "--coordinators", addresses, "--timeout-s", TIMEOUT_S, creds=stranger),
            "refused")  # fmt: skip

    # the admin's own key, but a wrong public key for every coordinator
    admin = credentials.load(admin_creds)
    wrong = write_creds(
        root / "wrong-server.credentials",
        "admin",
        admin.keypair,
        [(a, KeyPair.generate().public) for a in group.rpc],
    )
    t0 = time.monotonic()
    with pytest.raises(Unauthenticated, match="does not hold the key|not hold"):
        table_names(wrong, group.rpc)
    assert time.monotonic() - t0 < 10

    # a credentials file its group may read is refused before anything is sent
    loose = root / "loose.credentials"
    loose.write_bytes(open(admin_creds, "rb").read())
    os.chmod(loose, 0o640)
    text = refused(cli("tables", "--coordinators", addresses, creds=loose), "chmod 600")
    assert "0640" in text
    with pytest.raises(logcentric.BadRequest, match="group or others may read"):
        table_names(str(loose), group.rpc)

    # the environment variable names the file as --credentials does
    env = {credentials.CREDENTIALS_ENV: admin_creds}
    assert cli("tables", "--coordinators", addresses, "--json", env=env).returncode == 0


def test_a_revoked_user_is_refused_at_its_next_call(cluster):
    group, keys, admin_creds, root = cluster
    addresses = ",".join(group.rpc)
    path = root / "temp.credentials"
    ok_json(
        cli("users", "add", "temp", "--role", "writer", "--out", str(path),
            "--coordinators", addresses, "--json", creds=admin_creds)
    )  # fmt: skip
    with logcentric.connect(group.rpc, credentials=str(path), timeout_s=20) as client:
        assert client.list_tables() == []  # admitted, connection open
        out = cli("users", "revoke", "temp", "--coordinators", addresses, "--json",
                  creds=admin_creds)  # fmt: skip
        assert ok_json(out) == {"name": "temp", "state": "revoked"}
        t0 = time.monotonic()
        with pytest.raises(Unauthenticated):
            client.list_tables()  # the same open connection, the very next call
        assert time.monotonic() - t0 < 10


def test_without_an_admin_key_the_first_leader_writes_admin_credentials(tmp_path):
    """A single development node: `--curve` without --admin-public-key makes the admin's
    key pair and credentials file (0600) in the data dir, logs the admin, and says where."""
    data = tmp_path / "solo"
    rpc, raft = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    proc = Proc(
        ["-m", "optools.coordinator_cli", "start", "--id", "solo", "--data-dir", str(data),
         "--bind", rpc, "--raft", raft, "--insecure-dev", "--curve"],
        tmp_path / "solo.log",
    )  # fmt: skip
    try:
        path = data / "admin.credentials"
        wait_for(lambda: "admin.credentials" in proc.text() and "logged" in proc.text(), 90,
                 "the bootstrap admin's credentials")  # fmt: skip
        assert str(path) in proc.text()
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        creds = credentials.load(path)
        node_key = ok_json(cli("show-key", "--data-dir", str(data), "--json"))
        assert node_key["made"] is False and node_key["admin_credentials"] == str(path)
        assert creds.coordinators == ((rpc, node_key["public_key"]),)
        listed = ok_json(cli("users", "list", "--json", creds=path))  # addresses from the file
        assert [(p["name"], p["public_key"]) for p in listed] == [("admin", creds.keypair.public)]
    finally:
        proc.stop()
