"""The `coordinator` command as a user meets it: bad usage is one line and exit status 2, never
a traceback; and the last step of decommissioning a tablet server (retire, stop, wait until
it is marked down, remove-tserver) on a real local cluster, with `replication` accounting for
the tablets of a table still being created."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optools import admin
from optools.localcluster import LocalCluster
from rpc.protocols import coordinator_pb2 as cpb
from tests.support.cli import assert_usage_error, run_cli
from tests.support.cluster import local_cluster

CLI_TIMEOUT_S = 120
A = "127.0.0.1:1"  # a well-formed address: the commands below fail before calling it


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_cli("optools.coordinator_cli", *args, timeout_s=CLI_TIMEOUT_S)


def wait_for(cond, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.2)


# ------------------------------------------------------------ bad usage: one line, exit 2

BAD_USAGE = [
    (["create-table", "x", "--columns", "id:int64:key", "--tablets", "-3",
      "--coordinators", A], "--tablets"),
    (["create-table", "x", "--columns", "id:int64:key", "--tablets", str(2**32),
      "--coordinators", A], "--tablets"),
    (["create-table", "x", "--columns", "id:int64:key", "--replication", "-1",
      "--coordinators", A], "--replication"),
    (["set-replication", "t1", "-1", "--coordinators", A], "factor"),
    (["set-replication", "t1", "0", "--coordinators", A], "factor"),
    (["tables", "--coordinators", ""], "at least one HOST:PORT"),
    (["tables", "--coordinators", ","], "at least one HOST:PORT"),
    (["status", "--coordinators", ","], "at least one HOST:PORT"),
    (["servers", "--coordinators", ","], "at least one HOST:PORT"),
    (["describe", "x", "--coordinators", " , "], "at least one HOST:PORT"),
    (["status", "--coordinators", "127.0.0.1"], "a port is needed"),
    (["servers", "--coordinators", f"{A},127.0.0.1"], "a port is needed"),
    (["tables", "--coordinators", A, "--timeout-s", "0"], "--timeout-s"),
    (["status", "--coordinators", A, "--timeout-s", "-1"], "--timeout-s"),
    (["servers", "--coordinators", A, "--timeout-s", "nan"], "--timeout-s"),
    (["retire-tserver", "u", "--coordinators", A, "--wait-s", "-1"], "--wait-s"),
    (["remove-tserver", "u", "--coordinators", ","], "at least one HOST:PORT"),
    (["log", "--address", ""], "--address"),
    (["log", "--address", ","], "--address"),
    (["log", "--address", "127.0.0.1"], "a port is needed"),
    (["--log-level", "bogus", "tables", "--coordinators", A], "--log-level"),
    (["start", "--id", "x", "--data-dir", "/nonexistent", "--raft", A,
      "--tserver-timeout-s", "0"], "--tserver-timeout-s"),
    (["start", "--id", "x", "--data-dir", "/nonexistent", "--raft", "garbage",
      "--insecure-dev"], "--raft"),
    (["start", "--id", "x", "--data-dir", "/nonexistent", "--raft", "127.0.0.1:0"], "--raft"),
    (["start", "--id", "x", "--data-dir", "/nonexistent", "--raft", A,
      "--peers", f"{A},127.0.0.1"], "--peers"),
    (["start", "--id", "x", "--data-dir", "/nonexistent", "--raft", A,
      "--bind", "nope"], "--bind"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "words"), BAD_USAGE, ids=[" ".join(a) for a, _ in BAD_USAGE])
def test_bad_usage_is_one_line_not_a_traceback(argv, words):
    assert_usage_error(cli(*argv), "coordinator", words)


def test_log_messages(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a data dir\n")
    out = cli("log", "--data-dir", str(a_file))
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert (
        out.stderr.strip() == f"coordinator log: {a_file}: not a directory (give a node's data dir)"
    )
    out = cli("log", "--data-dir", "/nonexistent/dir")
    assert out.returncode == 1 and "no such directory" in out.stderr
    out = cli("log", "--help")
    assert out.returncode == 0
    assert "coordinator nodes or of `logstore serve` replicas" in " ".join(out.stdout.split())
    out = cli("--log-level", "debug", "log", "--data-dir", "/nonexistent/dir")
    assert out.returncode == 1 and "no such directory" in out.stderr  # a known level is taken


def test_argument_types_accept_what_is_valid():
    assert admin.addresses_arg(" h:1 , [::1]:7100,") == ["h:1", "[::1]:7100"]
    assert admin.timeout_arg("0.5") == 0.5 and admin.wait_arg("0") == 0.0
    assert admin.count_arg(0)("0") == 0 and admin.count_arg(1)(str(2**32 - 1)) == 2**32 - 1


def test_replication_summary_counts_tablets_of_tables_not_running():
    # 16 tablets, 4 judged healthy: the 12 others belong to tables being created.
    st = cpb.ReplicationStatusResponse(tablets=16, healthy_tablets=4)
    assert admin.not_running_tablets(st) == 12
    st = cpb.ReplicationStatusResponse(tablets=5, healthy_tablets=2, under_replicated=2, unknown=1)
    assert admin.not_running_tablets(st) == 0
    # Counted one after the other: a table dropped in between never makes it negative.
    st = cpb.ReplicationStatusResponse(tablets=2, healthy_tablets=4)
    assert admin.not_running_tablets(st) == 0


# ------------------------------------------------------------ decommissioning, for real


@pytest.fixture
def cluster(tmp_path):
    with local_cluster(tmp_path / "cluster", coordinators=1, tservers=3) as c:
        yield c


def _servers(c: list[str]) -> dict[str, dict]:
    out = cli("servers", *c)
    assert out.returncode == 0, out.stderr
    rows = [line.split("\t") for line in out.stdout.splitlines()]
    return {r[0]: {"address": r[1], "state": r[2], "retired": r[-1] == "retired"} for r in rows}


def _replication(c: list[str]) -> dict:
    out = cli("replication", *c, "--json")
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


@pytest.mark.integration
def test_retire_stop_remove_tserver(cluster: LocalCluster):
    # A secure cluster (the default): every command as its admin.
    c = ["--coordinators", ",".join(cluster.spec.coordinator_addresses),
         "--credentials", str(cluster.spec.admin_credentials)]  # fmt: skip
    out = cli("create-table", "kept", *c, "--columns", "id:int64:key", "--tablets", "2",
              "--replication", "2")  # fmt: skip
    assert out.returncode == 0, out.stderr
    wait_for(lambda: cli("replication", *c).returncode == 0, 60, "kept healthy")
    victim = cluster.spec.tservers[1]
    uuid = next(u for u, s in _servers(c).items() if s["address"] == victim.rpc)

    out = cli("remove-tserver", "no-such-server", *c)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "NOT_FOUND" in out.stderr and "coordinator servers" in out.stderr

    out = cli("retire-tserver", uuid, *c, "--wait-s", "120")
    assert out.returncode == 0, out.stderr
    assert f"coordinator remove-tserver {uuid}" in out.stdout

    # Still live: refused, and told what to do.
    out = cli("remove-tserver", uuid, *c)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "ILLEGAL_STATE" in out.stderr and "stop it first" in out.stderr

    # Retired: it gets no new replica (on a factor it would be needed for, refused), until
    # the retirement is cancelled.
    assert _servers(c)[uuid]["retired"]
    out = cli("create-table", "nowhere", *c, "--columns", "id:int64:key", "--replication", "3")
    assert out.returncode == 1 and "2 live tablet servers not retired" in out.stderr, out.stderr
    out = cli("retire-tserver", uuid, *c, "--cancel")
    assert out.returncode == 0 and "no longer retired" in out.stdout, out.stderr
    assert not _servers(c)[uuid]["retired"]
    out = cli("retire-tserver", uuid, *c, "--cancel")  # again: it says there was none
    assert out.returncode == 0 and "was not retired: nothing to cancel" in out.stdout, out.stderr
    out = cli("retire-tserver", uuid, *c, "--cancel", "--json")
    assert json.loads(out.stdout) == {"uuid": uuid, "retired": False, "was_retired": False}

    cluster.stop(victim)
    # Stopped but not yet marked down: a table placed on every live server (the victim
    # included) stays CREATING until the victim is marked down and its replica skipped.
    creating = subprocess.Popen(
        [sys.executable, "-m", "optools.coordinator_cli", "create-table", "pending", *c,
         "--columns", "id:int64:key", "--tablets", "2", "--replication", "3",
         "--timeout-s", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # The window lasts until the victim is marked down (5 s without a heartbeat); on a
        # loaded machine the create may finish before a `replication` call sees it, and
        # then there is nothing left to count (the rest of the test still runs).
        seen = wait_for(
            lambda: (
                (r := _replication(c))["not_running"] == 2
                and r
                or (creating.poll() is not None and {"missed": True})
            ),
            60,
            "the tablets of the table being created counted",
        )
        if not seen.get("missed"):
            assert seen["tablets"] == 4 and seen["healthy"] == 2
            text = cli("replication", *c).stdout
            assert (
                "of tables being created, altered or dropped 2" in text
                or creating.poll() is not None  # it completed between the two calls
            ), text
        out, err = creating.communicate(timeout=CLI_TIMEOUT_S)
    finally:
        if creating.poll() is None:
            creating.kill()
            creating.communicate()
    assert creating.returncode == 0 and "created table pending" in out, err
    every = _replication(c)
    assert every["not_running"] == 0
    assert every["tablets"] == every["healthy"] + every["under_replicated"] + every["unknown"]

    wait_for(lambda: _servers(c)[uuid]["state"] == "DOWN", 60, "the stopped server down")
    # Each tablet of `pending` is named with why it is under-replicated (nowhere to go).

    def pending_reasons() -> dict[str, str]:
        unhealthy = _replication(c)["unhealthy"]
        return {u["tablet_id"]: u["reason"] for u in unhealthy if u["table"] == "pending"}

    def reported() -> dict[str, str] | None:  # once both tablets' leaders have reported
        r = pending_reasons()
        waiting = any(
            "no report from a leader" in x or "an election is due" in x for x in r.values()
        )
        return r if len(r) == 2 and not waiting else None

    reasons = wait_for(reported, 30, "reasons given")
    for reason in reasons.values():
        assert f"voter on {uuid[:12]}, a DOWN server; 2 good voters of 3" == reason, reasons
    text = cli("replication", *c)
    assert text.returncode == 1 and "(pending): voter on" in text.stdout, text.stdout
    # Its replica of `pending` (rf 3 on two live servers) cannot be replaced: drop it, so that
    # only the server stands between the cluster and health.
    assert cli("drop-table", "pending", *c).returncode == 0
    out = cli("status", *c)
    assert out.returncode == 1 and f"{uuid} ({victim.rpc}) is DOWN" in out.stdout
    # Hosting nothing (once the drop is applied), it is named with the way to forget it.
    wait_for(
        lambda: f"`coordinator remove-tserver {uuid}`" in cli("status", *c).stdout,
        30,
        "status naming remove-tserver for a DOWN server with no replica",
    )

    out = cli("remove-tserver", uuid, *c)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"removed tablet server {uuid} ({victim.rpc})"
    assert uuid not in _servers(c)
    out = wait_for(lambda: (o := cli("status", *c)).returncode == 0 and o, 60, "status OK")
    assert "OK: the cluster is healthy" in out.stdout

    out = cli("remove-tserver", uuid, *c)  # a new request: the server is gone
    assert out.returncode == 1 and "NOT_FOUND" in out.stderr


@pytest.mark.integration
def test_retire_tserver_cancelled_while_it_waits(tmp_path):
    """`retire-tserver` waiting for the drain learns that another operator cancelled the
    retirement meanwhile: it stops waiting, says so and exits 1 (it does not log the
    retirement again). The drain cannot finish first: the tablet's other voter is stopped,
    so no change of its config can commit while the command waits."""
    with local_cluster(tmp_path / "cluster", coordinators=1, tservers=4) as cluster:
        c = ["--coordinators", ",".join(cluster.spec.coordinator_addresses),
             "--credentials", str(cluster.spec.admin_credentials)]  # fmt: skip
        out = cli("create-table", "one", *c, "--columns", "id:int64:key", "--tablets", "1",
                  "--replication", "2")  # fmt: skip
        assert out.returncode == 0, out.stderr
        wait_for(lambda: cli("replication", *c).returncode == 0, 60, "one healthy")

        def hosting() -> dict[str, str]:  # uuid -> address of the servers with a replica
            out = cli("servers", *c)
            assert out.returncode == 0, out.stderr
            rows = [line.split("\t") for line in out.stdout.splitlines()]
            return {r[0]: r[1] for r in rows if r[3] == "replicas=1"}

        (retired, _), (other, other_address) = sorted(hosting().items())
        cluster.stop(next(t for t in cluster.spec.tservers if t.rpc == other_address))
        wait_for(lambda: _servers(c)[other]["state"] == "DOWN", 60, "the other voter down")

        waiting = subprocess.Popen(
            [sys.executable, "-m", "optools.coordinator_cli", "retire-tserver", retired, *c,
             "--wait-s", "120"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            wait_for(lambda: _servers(c)[retired]["retired"], 30, "the retirement logged")
            out = cli("retire-tserver", retired, *c, "--cancel")
            assert out.returncode == 0 and "no longer retired" in out.stdout, out.stderr
            stdout, stderr = waiting.communicate(timeout=CLI_TIMEOUT_S)
        finally:
            if waiting.poll() is None:
                waiting.kill()
                waiting.communicate()
        assert waiting.returncode == 1, (stdout, stderr)
        assert f"retired {retired}: 1 replicas to move off it" in stdout, stdout
        assert "Traceback" not in stderr, stderr
        assert (
            f"{retired} had its retirement cancelled while its replicas were moving off" in stderr
        ), stderr
        # Cancelled, not drained: the replica is still there and the server takes new ones.
        assert retired in hosting() and not _servers(c)[retired]["retired"]


def test_local_cluster_up_fails_when_a_node_it_restarts_dies_at_start(tmp_path):
    """A tablet server stopped a moment ago is still LIVE to the coordinator: `up` must not
    take that for the restarted process serving. One that cannot start (a damaged instance
    file) fails `up` with exit 1 and its log's last lines."""
    root = tmp_path / "cluster"
    with local_cluster(root, coordinators=1, tservers=2) as cluster:
        victim = cluster.spec.tservers[1]
        cluster.stop(victim)
        (Path(victim.data) / "instance").write_bytes(b"garbage\n")
        out = run_cli("optools.coordinator_cli", "local-cluster", "up", "--dir", str(root))
        assert out.returncode == 1, (out.stdout, out.stderr)
        assert f"{victim.name} is not running" in out.stderr, out.stderr
        assert "corrupt instance file" in out.stderr, out.stderr
        assert "cluster up" not in out.stdout
