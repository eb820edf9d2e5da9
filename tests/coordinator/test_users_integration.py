"""`coordinator users` against a real three-node coordinator group: add (key pair and 0600
credentials file), list, set-roles, revoke; a key held twice refused; the records in
`coordinator log`; the principals table after a restart of every node. (A failover between
an add's commit point and its DONE: tests/coordinator/test_crash_points_integration.py,
the `principal.*` points.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess

import pytest
import zmq
from coordproc import CoordinatorGroup, wait_for

from rpc import privileged
from rpc.errors import RpcError
from rpc.protocols import coordinator_pb2 as pb
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration


def cli(group: CoordinatorGroup, *args: str, password: bool = True):
    extra = ["--coordinators", ",".join(group.rpc), "--timeout-s", "30"]
    if password and args[0] == "users":
        extra += ["--password-file", str(group.password_file)]
    return run_cli("optools.coordinator_cli", *args, *extra, timeout_s=120)


def ok_json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


def refused(out: subprocess.CompletedProcess, code: int, *words: str) -> None:
    text = out.stderr.strip()
    assert out.returncode == code, (out.stdout, text)
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for word in words:
        assert word in text, text


def listed(group: CoordinatorGroup, *, by_cli: bool = False) -> dict[str, tuple]:
    """name -> (kind, state, roles, public key): from `users list --json`, else from the
    ListPrincipals answer (quicker: no process to start)."""
    if by_cli:
        doc = ok_json(cli(group, "users", "list", "--json"))
    else:
        key = privileged.derive_key(group.password_file.read_text().strip())
        with group.client(timeout_s=30.0, privileged_key=key) as client:
            answer = client.call(
                "ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse
            )
        doc = [
            {"name": p.name, "kind": p.kind, "state": p.state, "roles": list(p.roles),
             "public_key": p.public_key}
            for p in answer.principals
        ]  # fmt: skip
    return {p["name"]: (p["kind"], p["state"], tuple(p["roles"]), p["public_key"]) for p in doc}


def start_all(group: CoordinatorGroup) -> None:
    for i in range(3):
        group.start(i)
    group.wait_started()
    key = privileged.derive_key(group.password_file.read_text().strip())
    with group.client(timeout_s=30.0, privileged_key=key) as client:
        group.leader_index(client, 60)

        def serving():
            try:
                client.call("ListPrincipals", pb.ListPrincipalsRequest(), pb.ListPrincipalsResponse)
                return True
            except RpcError:
                return False

        wait_for(serving, 60, "the leader serves")


def test_users_add_list_revoke_and_restart(tmp_path):
    # Plaintext, said explicitly: this test is the password-signed path of `users` on a
    # plaintext group (section 1's privileged methods; credentials files without keys; the
    # last admin is the only one, no bootstrap admin). The CURVE path, the default:
    # test_curve_clients_integration.py.
    group = CoordinatorGroup(tmp_path, 3, insecure=True)
    try:
        start_all(group)
        creds = tmp_path / "alice.credentials"
        added = ok_json(
            cli(group, "users", "add", "alice", "--role", "writer,reader", "--out", str(creds),
                "--json")
        )  # fmt: skip
        assert added["name"] == "alice" and added["roles"] == ["writer", "reader"]
        assert added["credentials_file"] == str(creds)
        assert stat.S_IMODE(os.stat(creds).st_mode) == 0o600
        doc = json.loads(creds.read_text())
        assert doc["public_key"] == added["public_key"]
        assert zmq.curve_public(doc["secret_key"].encode()).decode() == doc["public_key"]
        # plaintext nodes: addresses without keys (a CURVE group's carry each node's key)
        assert doc["coordinators"] == [{"address": a} for a in group.rpc]
        assert doc["roles"] == ["writer", "reader"]
        # An admin from a public key file (a zmq certificate); no credentials file then.
        pub, _ = zmq.auth.create_certificates(str(tmp_path), "root")
        root = ok_json(cli(group, "users", "add", "root", "--role", "admin", "--public-key", pub,
                           "--json"))  # fmt: skip
        assert root["credentials_file"] is None
        root_key = zmq.auth.load_certificate(pub)[0].decode()
        alice_key = added["public_key"]
        assert listed(group, by_cli=True) == {
            "alice": ("user", "active", ("writer", "reader"), alice_key),
            "root": ("user", "active", ("admin",), root_key),
        }

        # Refusals: one line, nothing changed.
        key_file = tmp_path / "alice.pub"
        key_file.write_text(alice_key + "\n")
        refused(
            cli(group, "users", "add", "bob", "--role", "reader", "--public-key", str(key_file)),
            1, "ALREADY_EXISTS", "belongs to principal 'alice'",
        )  # fmt: skip
        refused(cli(group, "users", "add", "bob", "--role", "root"), 2, "unknown role 'root'")
        refused(cli(group, "users", "add", "alice", "--role", "reader", "--out",
                    str(tmp_path / "a2")), 1, "ALREADY_EXISTS")  # fmt: skip
        assert not (tmp_path / "a2").exists()  # the secret of a key never logged is gone
        # A file that exists is refused and left as it was: alice's own credentials, or any
        # file named by --out (the refusal used to unlink it).
        before = creds.read_bytes()
        refused(cli(group, "users", "add", "carol", "--role", "reader", "--out", str(creds)),
                1, "exists")  # fmt: skip
        assert creds.read_bytes() == before
        precious = tmp_path / "important.txt"
        precious.write_text("precious\n")
        refused(cli(group, "users", "add", "dave", "--role", "reader", "--out", str(precious)),
                1, "exists")  # fmt: skip
        assert precious.read_text() == "precious\n"
        refused(cli(group, "users", "list", password=False), 1, "UNAUTHENTICATED")
        refused(cli(group, "users", "revoke", "root"), 1, "without an active admin")
        assert set(listed(group)) == {"alice", "root"}

        out = cli(group, "users", "set-roles", "alice", "--role", "reader")
        assert out.returncode == 0 and "alice now has: reader" in out.stdout, out.stderr
        out = cli(group, "users", "revoke", "alice")
        assert out.returncode == 0 and "revoked alice" in out.stdout, out.stderr
        # Its key is free for another principal now.
        out = cli(group, "users", "add", "bob", "--role", "reader", "--public-key", str(key_file))
        assert out.returncode == 0, out.stderr
        expected = {
            "alice": ("user", "revoked", ("reader",), alice_key),
            "bob": ("user", "active", ("reader",), alice_key),
            "root": ("user", "active", ("admin",), root_key),
        }
        assert listed(group) == expected
        text = cli(group, "users", "list").stdout
        assert f"alice\tuser\treader\trevoked\t{alice_key}" in text

        # The records in `coordinator log`: the live log holds one record per principal,
        # the DONE of its last operation (each DONE invalidated its STARTED and the
        # principal's previous record).
        log = ok_json(cli(group, "log", "--type", "principal", "--json"))
        records = log["records"] if isinstance(log, dict) else log
        seen = [
            (r["record"]["principal"]["action"], r["record"]["principal"]["name"], r["phase"],
             r["status"])
            for r in records
        ]  # fmt: skip
        assert seen == [
            ("add", "root", "DONE", "live"),
            ("revoke", "alice", "DONE", "live"),
            ("add", "bob", "DONE", "live"),
        ]
        assert records[1]["invalidates"] and records[1]["record"]["principal"]["old_roles"] == [
            "reader"
        ]
        lines = cli(group, "log", "--type", "principal", "--live-only").stdout
        assert "revoke principal=alice kind=user" in lines and "state=active->revoked" in lines

        # Every node restarted: the table is the log's.
        for p in group.procs:
            p.kill()
        start_all(group)
        assert listed(group) == expected
    finally:
        group.close()
