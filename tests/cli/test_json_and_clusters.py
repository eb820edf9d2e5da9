"""`--json` and naming a cluster, on one real local cluster started by the command itself
(`coordinator local-cluster up --json`): every listing and status command prints one JSON
document of its documented shape (design/client.md), and the cluster a command talks to is
found by --coordinators, else --cluster, else $LOGCENTRIC_COORDINATORS / $LOGCENTRIC_CLUSTER,
else the clusters file's default. `logstore status` works against the coordinators' own log.
Every subcommand with --json is exercised here (test_every_json_command_is_covered)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optools.localcluster import ClusterSpec, LocalCluster
from rpc import clusters
from tests.cli.helpers import env_with, has_option, parsers, run, run_json, subcommands, wait_for

pytestmark = pytest.mark.integration

DEAD = "127.0.0.1:1"  # nothing listens there: a command sent to it fails
COVERED: set[tuple[str, ...]] = set()  # (script, *words) of each --json command run here


def json_cmd(name: str, *args: str, env, ok_codes=(0,)):
    words = tuple(a for a in args if not a.startswith("-"))
    tree = parsers()[name]
    extra: tuple[str, ...] = ()
    for n in range(len(words), 0, -1):
        if words[:n] in set(subcommands(tree)):
            COVERED.add((name, *words[:n]))
            if has_option(tree, words[:n], "--timeout-s") and "--timeout-s" not in args:
                extra = ("--timeout-s", "120")  # the machine may be loaded
            break
    return run_json(name, *args, *extra, "--json", env=env, ok_codes=ok_codes)


class Cluster:
    def __init__(self, root: Path, config: Path, up: dict) -> None:
        self.root, self.config, self.up = root, config, up
        self.env = env_with(config)
        self.coordinators = ",".join(up["coordinators"])
        self.tserver = up["tservers"][0]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli-json")
    root, config = base / "cluster", base / "clusters.toml"
    env = env_with(config)
    try:
        # Plaintext on purpose: this module runs every --json command, and the `logstore`
        # tools and the `tserver` tools but `start` take no credentials yet
        # (design/security.md section 2, "Not built yet"); secure `up`: test_local_cluster_secure.
        up, _ = run_json(
            "coordinator", "local-cluster", "up", "--dir", str(root), "--coordinators", "3",
            "--tservers", "1", "--lease-timeout-s", "1.0", "--insecure", "--json", env=env,
        )  # fmt: skip
        COVERED.add(("coordinator", "local-cluster", "up"))
        yield Cluster(root, config, up)
    finally:
        spec = ClusterSpec.load(root)
        if spec is not None:
            LocalCluster(spec).down()


# ------------------------------------------------------------ local-cluster, clusters


def test_up_json_names_the_cluster_and_registers_it(cluster):
    up = cluster.up
    assert set(up) == {
        "root", "coordinators", "tservers", "cluster", "clusters_file", "elapsed_s", "secure",
        "credentials",
    }  # fmt: skip
    assert up["secure"] is False and up["credentials"] is None
    assert up["root"] == str(cluster.root.resolve())
    assert len(up["coordinators"]) == 3 and len(up["tservers"]) == 1
    assert up["cluster"] == "local" and up["clusters_file"] == str(cluster.config)
    doc, _ = json_cmd("coordinator", "clusters", env=cluster.env)
    assert doc == {
        "file": str(cluster.config),
        "default": "local",
        "clusters": [{"name": "local", "coordinators": up["coordinators"]}],
    }
    out = run("coordinator", "clusters", env=cluster.env)
    assert out.returncode == 0 and out.stdout.split() == ["local", cluster.coordinators, "default"]


def test_local_cluster_status_json(cluster):
    doc, _ = json_cmd("coordinator", "local-cluster", "status", "--dir", str(cluster.root),
                      env=cluster.env)  # fmt: skip
    assert doc["healthy"] is True and doc["root"] == str(cluster.root.resolve())
    assert [c["address"] for c in doc["coordinators"]] == cluster.up["coordinators"]
    assert all(c["up"] and c["pid"] > 0 and not c["error"] for c in doc["coordinators"])
    assert sorted(c["state"] for c in doc["coordinators"]).count("LEADER") == 1
    assert doc["tservers"] == [
        {"name": "tserver-0", "address": cluster.tserver, "pid": doc["tservers"][0]["pid"],
         "up": True, "state": "LIVE", "error": ""}
    ]  # fmt: skip


# ------------------------------------------------------------ the coordinators' own log


def test_logstore_status_against_the_coordinators_log(cluster):
    """Each coordinator node answers with its replica of the coordinator log."""
    doc, _ = json_cmd("logstore", "status", "--cluster", "local", env=cluster.env)
    assert doc["healthy"] is True and doc["problems"] == []
    replicas = doc["replicas"]
    assert [r["address"] for r in replicas] == cluster.up["coordinators"]
    assert all(r["ok"] and r["error"] == "" for r in replicas), replicas
    assert sorted(r["role"] for r in replicas) == ["follower", "follower", "leader"]
    leader = next(r for r in replicas if r["role"] == "leader")
    assert doc["leader"] == leader["raft_address"]
    for r in replicas:
        assert r["term"] >= 1 and r["commit_index"] >= 1 and r["applied_index"] >= 1
        assert r["members"] == sorted(x["raft_address"] for x in replicas)
        assert r["logs"]["coordinator"] >= 1
    # The text form, by the coordinators' addresses: healthy, exit 0.
    out = run("logstore", "status", "--coordinators", cluster.coordinators, env=cluster.env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1].startswith("OK: 3 replicas answered, leader ")
    assert "did not answer" not in out.stdout


def test_logstore_read_and_last_id_json(cluster):
    last, _ = json_cmd("logstore", "last-id", "coordinator", "--cluster", "local",
                       env=cluster.env)  # fmt: skip
    assert last["log"] == "coordinator" and last["last_id"] >= 1
    doc, _ = json_cmd("logstore", "read", "coordinator", "--limit", "5",
                      "--coordinators", cluster.coordinators, env=cluster.env)  # fmt: skip
    assert doc["log"] == "coordinator" and 1 <= len(doc["entries"]) <= 5
    for e in doc["entries"]:
        assert set(e) == {"id", "data_base64", "data_text", "invalidates"}
        assert e["id"] >= 1 and isinstance(e["invalidates"], list)


# ------------------------------------------------------------ coordinator listings


def test_coordinator_listings_json(cluster):
    env = cluster.env  # the default cluster: no flag at all
    for name in ("cli_a", "cli_b"):
        doc, _ = json_cmd("coordinator", "create-table", name, "--columns", "id:int64:key,v:string",
                          "--tablets", "1", "--replication", "1", env=env)  # fmt: skip
        assert doc["name"] == name
    doc, _ = json_cmd("coordinator", "tables", env=env)
    assert sorted(t["name"] for t in doc["tables"]) == ["cli_a", "cli_b"]
    doc, _ = json_cmd("coordinator", "describe", "cli_a", env=env)
    assert doc["name"] == "cli_a" and len(doc["tablets"]) == 1
    doc, _ = json_cmd("coordinator", "servers", env=env)
    assert [s["address"] for s in doc] == [cluster.tserver]
    doc, _ = json_cmd("coordinator", "status", env=env, ok_codes=(0, 1))
    assert {n["address"] for n in doc["nodes"]} == set(cluster.up["coordinators"])
    doc, _ = json_cmd("coordinator", "replication", env=env, ok_codes=(0, 1))
    assert doc["tablets"] >= 2
    doc, _ = json_cmd("coordinator", "drop-table", "cli_b", env=env)
    assert doc["name"] == "cli_b"


# ------------------------------------------------------------ tserver listings


def _tablet_on_the_server(cluster) -> str:
    out = run("coordinator", "create-table", "cli_t", "--columns", "id:int64:key",
              "--tablets", "1", "--replication", "1", env=cluster.env)  # fmt: skip
    assert out.returncode == 0, out.stderr

    def ready():
        doc, _ = json_cmd("tserver", "tablets", "--address", cluster.tserver, env=cluster.env)
        assert doc["source"] == "live" and doc["address"] == cluster.tserver
        return [t for t in doc["tablets"] if t["table_name"] == "cli_t" and t["role"]]

    return wait_for(ready, 120, "the tablet of cli_t on the tablet server")[0]["tablet_id"]


def test_tserver_listings_json(cluster):
    tablet = _tablet_on_the_server(cluster)
    fs_root = str(cluster.root.resolve() / "tserver-0")
    st, _ = json_cmd("tserver", "status", "--address", cluster.tserver, env=cluster.env)
    assert st["address"] == cluster.tserver and st["tablets"] >= 1 and st["copies"] == []
    assert st["wal_sync_enabled"] is True
    doc, _ = json_cmd("tserver", "copies", "--address", cluster.tserver, env=cluster.env)
    assert doc == {"address": cluster.tserver, "copies": []}
    doc, _ = json_cmd("tserver", "fs", "uuid", "--fs-root", fs_root, env=cluster.env)
    assert doc == {"fs_root": fs_root, "uuid": st["uuid"]}
    doc, _ = json_cmd("tserver", "tablets", "--fs-root", fs_root, env=cluster.env)
    assert doc["source"] == "fs" and doc["fs_root"] == fs_root
    row = next(t for t in doc["tablets"] if t["tablet_id"] == tablet)
    assert row["table_name"] == "cli_t" and row["data_state"] == "READY"
    assert row["error"] == ""
    doc, _ = json_cmd("tserver", "cmeta", "dump", "--fs-root", fs_root, "--tablet", tablet,
                      env=cluster.env)  # fmt: skip
    assert doc["tablet_id"] == tablet
    peers = doc["cmeta"]["committed_config"]["peers"]
    assert [p["uuid"] for p in peers] == [st["uuid"]]
    # The WAL of the tablet, read beside the running server (read-only).
    doc, _ = json_cmd("tserver", "wal", "dump", "--fs-root", fs_root, "--tablet", tablet,
                      env=cluster.env)  # fmt: skip
    assert doc["segments"] and doc["segments"][0]["tablet_id"] == tablet
    # What the drop of cli_b (test_coordinator_listings_json) set aside, if it ran.
    doc, _ = json_cmd("tserver", "quarantine", "list", "--fs-root", fs_root, env=cluster.env)
    assert isinstance(doc, list)
    for e in doc:
        assert set(e) == {"name", "tablet_id", "size_bytes", "age_s", "mtime_s", "removing"}


def test_tserver_start_enlists_with_a_named_cluster(cluster, tmp_path):
    """`tserver start --cluster local` heartbeats to that cluster's coordinators."""
    from tests.cli.helpers import interrupt, kill_group, spawn, without_insecure_warning

    root = tmp_path / "t2"
    assert run("tserver", "fs", "format", "--fs-root", str(root)).returncode == 0
    # The module's cluster is plaintext (see the fixture): so is the server joining it.
    proc = spawn("tserver", "start", "--fs-root", str(root), "--cluster", "local",
                 "--log-level", "warning", "--password-file", str(cluster.root / "password"),
                 "--insecure", env=cluster.env)  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("tserver "), (line, proc.poll())
        # "tserver UUID serving on HOST:PORT ..." (an --insecure server says so after it).
        uuid, address = line.split()[1], line.split("serving on ", 1)[1].split()[0]

        def enlisted():
            doc, _ = json_cmd("coordinator", "servers", env=cluster.env)
            return any(s["uuid"] == uuid and s["address"] == address for s in doc)

        wait_for(enlisted, 120, "the new tablet server enlisted")
        _out, err = interrupt(proc)
        assert proc.returncode == 130, err
        assert without_insecure_warning(err).splitlines() == ["tserver: interrupted"]
    finally:
        kill_group(proc)


# ------------------------------------------------------------ precedence


def _tables(cluster, *flags, **env) -> int:
    """`coordinator tables` with these flags and environment: 0 when it reached the real
    cluster (a generous deadline: the machine may be loaded), 1 when it was sent to DEAD
    (a short one: nothing answers there; the error must name DEAD, not a slow real one)."""
    to_dead = run("coordinator", "tables", "--timeout-s", "5", *flags,
                  env=env_with(cluster.config, **env))  # fmt: skip
    if to_dead.returncode == 0:
        return 0
    assert "Traceback" not in to_dead.stderr
    if DEAD in to_dead.stderr:
        return 1
    # Not DEAD's failure: the real cluster, slow to answer. Once more, with time to spare.
    out = run("coordinator", "tables", "--timeout-s", "120", *flags,
              env=env_with(cluster.config, **env))  # fmt: skip
    assert out.returncode == 0, out.stderr
    return 0


def test_precedence_flag_then_cluster_then_environment_then_default(cluster, tmp_path):
    # Two more names in the same clusters file: "dead" points nowhere.
    clusters.register("dead", [DEAD], path=cluster.config)
    try:
        real = cluster.coordinators
        # the default (local) alone
        assert _tables(cluster) == 0
        # --coordinators beats --cluster (never looked up: not even known) and the environment
        assert _tables(cluster, "--coordinators", real, "--cluster", "nowhere",
                       LOGCENTRIC_COORDINATORS=DEAD) == 0  # fmt: skip
        assert _tables(cluster, "--coordinators", DEAD, "--cluster", "local") == 1
        # --cluster beats the environment
        assert _tables(cluster, "--cluster", "local", LOGCENTRIC_COORDINATORS=DEAD) == 0
        assert _tables(cluster, "--cluster", "dead", LOGCENTRIC_COORDINATORS=real) == 1
        # $LOGCENTRIC_COORDINATORS beats $LOGCENTRIC_CLUSTER beats the default
        assert _tables(cluster, LOGCENTRIC_COORDINATORS=real, LOGCENTRIC_CLUSTER="dead") == 0
        assert _tables(cluster, LOGCENTRIC_COORDINATORS=DEAD, LOGCENTRIC_CLUSTER="local") == 1
        assert _tables(cluster, LOGCENTRIC_CLUSTER="dead") == 1
        clusters.register("dead", [DEAD], make_default=True, path=cluster.config)
        assert _tables(cluster) == 1
        assert _tables(cluster, LOGCENTRIC_CLUSTER="local") == 0
        # the same order for `coordinator log` (live) and `logstore status`
        out = run("coordinator", "log", "--summary", "--timeout-s", "5", "--cluster", "local",
                  env=cluster.env)  # fmt: skip
        assert out.returncode == 0 and "source: live" in out.stdout, out.stderr
        out = run("logstore", "status", "--timeout-s", "5",
                  env=env_with(cluster.config, LOGCENTRIC_CLUSTER="local"))  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr
    finally:
        clusters.register("local", cluster.up["coordinators"], make_default=True,
                          path=cluster.config)  # fmt: skip
        clusters.unregister("dead", path=cluster.config)


def test_nothing_naming_a_cluster_says_what_to_give(tmp_path):
    env = env_with(tmp_path / "no-such-clusters.toml")
    for name, argv in [
        ("coordinator", ["tables"]),
        ("coordinator", ["status"]),
        ("coordinator", ["log"]),
        ("logstore", ["status"]),
    ]:
        out = run(name, *argv, env=env)
        assert out.returncode == 2, (argv, out.stderr)
        lines = out.stderr.splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert "--coordinators" in lines[0] and "--cluster" in lines[0], lines
        assert "LOGCENTRIC_COORDINATORS" in lines[0]
    out = run("coordinator", "tables", "--cluster", "nowhere", env=env)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1
    assert "cluster 'nowhere'" in out.stderr and "known: none" in out.stderr


def test_down_wipe_removes_its_registration(tmp_path):
    """Of a cluster of its own (one node), registered under a name of its own."""
    config, root = tmp_path / "clusters.toml", tmp_path / "small"
    env = env_with(config)
    clusters.register("other", [DEAD], path=config)
    up, _ = run_json("coordinator", "local-cluster", "up", "--dir", str(root), "--coordinators",
                     "1", "--tservers", "0", "--name", "small", "--json", env=env)  # fmt: skip
    try:
        assert clusters.load(config)["clusters"]["small"] == tuple(up["coordinators"])
        out = run("coordinator", "local-cluster", "down", "--dir", str(root), "--wipe", env=env)
        assert out.returncode == 0, out.stderr
        assert "cluster 'small' removed from the clusters file" in out.stdout
        doc = clusters.load(config)
        assert "small" not in doc["clusters"] and "other" in doc["clusters"]
    finally:
        spec = ClusterSpec.load(root)
        if spec is not None:
            LocalCluster(spec).down()


# ------------------------------------------------------------ coverage


def test_every_json_command_is_covered(cluster):
    """Every listing and status subcommand with --json was run above (this test runs last in
    the module). The mutating coordinator commands (add-node, move-replica, ...) have --json
    for their result and are left to their own tests; `log` prints JSON lines (a stream)."""
    not_listing = {
        ("coordinator", w)
        for w in ("add-node", "remove-node", "move-replica", "retire-tserver",
                  "remove-tserver", "set-replication", "log")
    }  # fmt: skip
    # Run with --json by their own tests (they need keys or an admin): users add/list/
    # set-roles/revoke (tests/coordinator/test_users_integration.py), coordinator show-key
    # (test_curve_clients_integration.py), tserver show-key (tests/tservers/test_tserver_keys.py).
    not_listing |= {("coordinator", "users", w) for w in ("add", "list", "set-roles", "revoke")}
    not_listing |= {("coordinator", "show-key"), ("tserver", "show-key")}
    # coordinator join-token --json: tests/coordinator/test_join_token_integration.py.
    not_listing.add(("coordinator", "join-token"))
    # logstore show-key --json: tests/logstore/test_serve_curve.py.
    not_listing.add(("logstore", "show-key"))
    # tserver fs downgrade --json (it changes a stopped server's root):
    # tests/tservers/test_hardstate_journal.py.
    not_listing.add(("tserver", "fs", "downgrade"))
    with_json = {
        (name, *words)
        for name, tree in parsers().items()
        for words in subcommands(tree)
        if has_option(tree, words, "--json")
    }
    assert with_json - not_listing - COVERED == set()
