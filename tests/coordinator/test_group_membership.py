"""Coordinator group membership end to end (architecture 4.6), with real processes:
migrate a one-node group to three nodes under load, and replace a permanently dead node by a
new one (new data dir, new UUID). No acknowledged operation may be lost and clients keep
working throughout. These are the procedures the README documents.

The nodes run with CURVE, the default: every node's key pair is made before its first start
(as `coordinator show-key` does), with an admin whose credentials list every node, the
bootstrap admin of every node (`--admin-public-key`); the tablet server is admitted by that
admin. A membership change is refused without credentials and done with the admin's."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from jobs.procs import ProcessGroup
from logcentric.client import Client, Column
from optools import coordinator_cli
from rpc import credentials, errors, keys
from rpc.addresses import free_port
from rpc.protocols.coordinator_pb2 import AddPrincipalRequest, AddPrincipalResponse
from tests.support.procs import wait_for

pytestmark = pytest.mark.integration

COLUMNS = [Column("id", "int64", key=True), Column("v", "string")]


class Node:
    def __init__(self, root: Path, name: str) -> None:
        self.name = name
        self.data = root / name
        self.rpc = f"127.0.0.1:{free_port()}"
        self.raft = f"127.0.0.1:{free_port()}"
        self.proc = None
        self.public_key = keys.create_keypair(self.data / "keys", "coordinator").public

    def start(self, group: ProcessGroup, password_file: Path, peers: list[Node]) -> None:
        admin_key = password_file.parent / "admin.key"
        args = [
            "start", "--id", self.name, "--data-dir", str(self.data), "--bind", self.rpc,
            "--raft", self.raft, "--password-file", str(password_file),
            "--lease-timeout-s", "1.0", "--admin-public-key", str(admin_key),
        ]  # fmt: skip
        if peers:
            args += ["--peers", ",".join(p.raft for p in peers)]
        self.proc = group.start(self.name, "optools.coordinator_cli", *args)
        self.proc.wait_line(r"serving on", 60)


class TableLoad:
    """Creates tables one after another; remembers the ones acknowledged."""

    def __init__(self, addresses: list[str], creds: Path) -> None:
        self.client = Client(addresses, timeout_s=60, credentials=str(creds))
        self.acked: list[str] = []
        self.errors: list[BaseException] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="table-load")
        self.thread.start()

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            name = f"m_{i}"
            i += 1
            try:
                self.client.create_table(name, COLUMNS, num_tablets=1)
                self.acked.append(name)
            except errors.RpcError as err:  # must not happen: the client rides failovers
                self.errors.append(err)
                return

    def wait_more(self, n: int, what: str) -> None:
        target = len(self.acked) + n
        wait_for(lambda: len(self.acked) >= target or self.errors, 90, what)
        assert not self.errors, self.errors

    def finish(self) -> list[str]:
        self.stop.set()
        self.thread.join(90)
        assert not self.thread.is_alive()
        assert not self.errors, self.errors
        return self.acked


def admin_credentials(root: Path, nodes: list[Node]) -> Path:
    """The admin's key pair: its public key for every node's --admin-public-key, its
    credentials file listing every node with its key."""
    admin_pair = keys.KeyPair.generate()
    (root / "admin.key").write_text(admin_pair.public + "\n")
    path = root / "admin.credentials"
    nodes_keys = [(n.rpc, n.public_key) for n in nodes]
    credentials.write(
        path, credentials.document("admin", "user", ["admin"], admin_pair, nodes_keys)
    )
    return path


def wait_admin(creds: Path, node: Node) -> None:
    """The node has logged (or applied) the bootstrap admin: it admits the admin's key."""

    def admits() -> bool:
        try:
            with Client([node.rpc], timeout_s=5, credentials=str(creds)) as client:
                client.meta.status(node.rpc, timeout_s=2)
            return True
        except errors.RpcError:
            return False

    wait_for(admits, 90, f"{node.name} admits the admin")


def membership(command: str, coordinators: list[Node], node: Node, creds: Path) -> None:
    """The change through `coordinator add-node/remove-node`: refused without credentials
    (a plaintext caller gets no connection to a CURVE node), done with the admin's."""
    args = [command, "--coordinators", ",".join(n.rpc for n in coordinators), "--raft",
            node.raft, "--timeout-s", "60"]  # fmt: skip
    assert coordinator_cli.main(args) == 1  # UNAUTHENTICATED, nothing changed
    assert coordinator_cli.main([*args, "--credentials", str(creds)]) == 0


def log_members(client: Client, node: Node) -> list[str]:
    # A node that joined admits the admin once it has applied the log's principals: until
    # it has loaded them it answers UNAVAILABLE (design/security.md section 3), and a key it
    # still does not know after is refused.
    try:
        return sorted(client.meta.status(node.rpc, timeout_s=5).log_members)
    except (errors.Unauthenticated, errors.Unavailable):
        return []


def start_tserver(group: ProcessGroup, root: Path, coordinators: list[Node], creds: Path) -> None:
    import subprocess
    import sys

    fs = root / "tserver"
    subprocess.run(
        [sys.executable, "-m", "tservers.cli", "fs", "format", "--fs-root", str(fs)],
        check=True, capture_output=True,
    )  # fmt: skip
    proc = group.start(
        "tserver", "tservers.cli", "start", "--fs-root", str(fs), "--bind",
        f"127.0.0.1:{free_port()}", "--coordinators", ",".join(n.rpc for n in coordinators),
        "--curve",  # `=`: a z85 key may start with "-"
        "--coordinator-keys=" + ",".join(n.public_key for n in coordinators),
    )  # fmt: skip
    match = proc.wait_line(r"tserver (\S+) serving on", 60)
    uuid = match.group(1)
    with Client([n.rpc for n in coordinators], timeout_s=30, credentials=str(creds)) as client:
        request = AddPrincipalRequest(
            request_id=client.meta.next_request_id(), name=uuid, kind="tserver",
            public_key=keys.load_public_key(fs / "keys" / "tserver.key"), roles=["server"],
        )  # fmt: skip
        client.meta.call("AddPrincipal", request, AddPrincipalResponse)
        wait_for(
            lambda: any(s.state == "LIVE" for s in client.list_servers()), 60, "tserver enlisted"
        )


def test_migrate_one_node_to_three_under_load(tmp_path):
    password = tmp_path / "password"
    password.write_text("membership-test-secret\n")
    a, b, c = (Node(tmp_path, n) for n in ("a", "b", "c"))
    creds = admin_credentials(tmp_path, [a, b, c])
    with ProcessGroup(tmp_path / "logs") as group:
        a.start(group, password, peers=[])
        wait_admin(creds, a)
        start_tserver(group, tmp_path, [a, b, c], creds)
        load = TableLoad([a.rpc, b.rpc, c.rpc], creds)
        try:
            load.wait_more(3, "tables on the single node")
            b.start(group, password, peers=[a])
            membership("add-node", [a], b, creds)
            load.wait_more(3, "tables with two nodes")
            c.start(group, password, peers=[a, b])
            membership("add-node", [a, b], c, creds)
            load.wait_more(3, "tables with three nodes")
            expected = sorted([a.raft, b.raft, c.raft])
            wait_for(
                lambda: all(log_members(load.client, n) == expected for n in (a, b, c)),
                60,
                "every node sees three log replicas",
            )
            # The group now survives the loss of the node it started from.
            a.proc.kill9()
            load.wait_more(3, "tables after the first node died")
            acked = load.finish()
            assert set(acked) <= set(load.client.list_tables())
        finally:
            load.stop.set()
            load.thread.join(90)
            load.client.close()


def test_replace_a_permanently_dead_node(tmp_path):
    password = tmp_path / "password"
    password.write_text("membership-test-secret\n")
    a, b, c, d = (Node(tmp_path, n) for n in ("a", "b", "c", "d"))
    creds = admin_credentials(tmp_path, [a, b, c, d])
    with ProcessGroup(tmp_path / "logs") as group:
        for node in (a, b, c):
            node.start(group, password, peers=[n for n in (a, b, c) if n is not node])
        for node in (a, b, c):
            wait_admin(creds, node)
        start_tserver(group, tmp_path, [a, b, c, d], creds)
        load = TableLoad([a.rpc, b.rpc, c.rpc, d.rpc], creds)
        try:
            load.wait_more(3, "tables on three nodes")
            c.proc.kill9()
            shutil.rmtree(c.data)  # gone for good
            load.wait_more(3, "tables with c dead")
            membership("remove-node", [a, b], c, creds)
            d.start(group, password, peers=[a, b])
            membership("add-node", [a, b], d, creds)
            expected = sorted([a.raft, b.raft, d.raft])
            wait_for(
                lambda: all(log_members(load.client, n) == expected for n in (a, b, d)),
                60,
                "the replacement is a member everywhere",
            )
            old_uuid = load.client.meta.status(a.rpc, timeout_s=5).uuid
            assert load.client.meta.status(d.rpc, timeout_s=5).uuid not in ("", old_uuid)
            load.wait_more(3, "tables after the replacement")
            # With d in, the group survives the loss of a as well.
            a.proc.kill9()
            load.wait_more(3, "tables after a died")
            acked = load.finish()
            assert set(acked) <= set(load.client.list_tables())
        finally:
            load.stop.set()
            load.thread.join(90)
            load.client.close()
