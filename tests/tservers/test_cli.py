"""The `tserver` operator tools: fs format/uuid, wal dump, cmeta dump/rewrite, tablets."""

from __future__ import annotations

import json
import subprocess

import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.support.cli import run_cli
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.fs import FsLayout

pytestmark = pytest.mark.integration  # every test runs the `tserver` command as a process


def tserver(*args: str) -> subprocess.CompletedProcess:
    return run_cli("tservers.cli", *args)


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    m = open_manager(r)
    t = create(m)
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(3))))], deadline())
    m.close()
    return r


def test_fs_format_and_uuid(tmp_path):
    r = tserver("fs", "format", "--fs-root", str(tmp_path / "a"))
    assert r.returncode == 0
    uuid = r.stdout.strip()
    assert tserver("fs", "uuid", "--fs-root", str(tmp_path / "a")).stdout.strip() == uuid
    again = tserver("fs", "format", "--fs-root", str(tmp_path / "a"))
    assert again.returncode == 1 and "not empty" in again.stderr
    assert "Traceback" not in again.stderr
    missing = tserver("fs", "uuid", "--fs-root", str(tmp_path / "b"))
    assert missing.returncode == 1 and "not formatted" in missing.stderr
    assert tserver("--help").returncode == 0


def test_wal_dump(root):
    r = tserver("wal", "dump", "--fs-root", str(root), "--tablet", "t1")
    assert r.returncode == 0, r.stderr
    assert "header: tablet t1 sequence 1" in r.stdout
    assert "NO_OP" in r.stdout and "INSERT 3 rows" in r.stdout
    assert "footer:" in r.stdout
    fs = FsLayout.open(root)
    seg_path = sorted(fs.wal_dir("t1").iterdir())[0]
    one = tserver("wal", "dump", "--segment", str(seg_path))
    assert one.returncode == 0 and "entry 1.1 NO_OP" in one.stdout
    doc = json.loads(
        tserver("wal", "dump", "--fs-root", str(root), "--tablet", "t1", "--json").stdout
    )
    entries = [e for s in doc["segments"] for e in s["entries"]]
    assert doc["segments"][0]["tablet_id"] == "t1" and doc["segments"][0]["sequence"] == 1
    assert entries[0]["type"] == "NO_OP" and any("INSERT 3 rows" in e["text"] for e in entries)
    data = bytearray(seg_path.read_bytes())
    data[len(data) // 2] ^= 0x20
    seg_path.write_bytes(bytes(data))
    bad = tserver("wal", "dump", "--fs-root", str(root), "--tablet", "t1")
    assert bad.returncode == 1 and "offset" in bad.stderr and str(seg_path) in bad.stderr


def test_cmeta_dump_and_rewrite(root):
    r = tserver("cmeta", "dump", "--fs-root", str(root), "--tablet", "t1")
    assert r.returncode == 0 and "current_term: 1" in r.stdout and "VOTER" in r.stdout
    low = tserver("cmeta", "rewrite", "--fs-root", str(root), "--tablet", "t1", "--term", "0")
    assert low.returncode == 1 and "refusing to lower the term" in low.stderr
    w = tserver(
        "cmeta",
        "rewrite",
        "--fs-root",
        str(root),
        "--tablet",
        "t1",
        "--term",
        "9",
        "--clear-vote",
        "--config-index",
        "4",
        "--peer",
        "u1=127.0.0.1:7000:VOTER",
        "--peer",
        "u2=127.0.0.1:7001:NON_VOTER",
    )
    assert w.returncode == 0, w.stderr
    fs = FsLayout.open(root)
    cm = fs.read_cmeta("t1")
    assert cm.current_term == 9 and cm.voted_for == "" and cm.committed_config.opid_index == 4
    assert [(p.uuid, p.address) for p in cm.committed_config.peers] == [
        ("u1", "127.0.0.1:7000"),
        ("u2", "127.0.0.1:7001"),
    ]
    backups = list((root / "consensus-meta").glob("t1.backup-*"))
    assert len(backups) == 1  # written before the change; none for the refused rewrite
    # Checked before anything is written: no backup, no change, one line, the right exit.
    rewrite = ("cmeta", "rewrite", "--fs-root", str(root), "--tablet", "t1")
    for args, status, words in (
        (("--term", "-1", "--force"), 2, "--term: must be 0.."),
        (("--voted-for", "x", "--clear-vote"), 2, "not allowed with argument"),
        (("--peer", "garbage"), 1, "bad --peer 'garbage'"),
        ((), 1, "nothing to change"),
        (("--term", "9"), 1, "nothing to change"),  # the current term already
    ):
        out = tserver(*rewrite, *args)
        assert out.returncode == status and words in out.stderr, (args, out.stderr)
        assert "Traceback" not in out.stderr and "backup written" not in out.stdout
    assert list((root / "consensus-meta").glob("t1.backup-*")) == backups
    assert fs.read_cmeta("t1") == cm
    assert tserver("cmeta", "dump", "--fs-root", str(root), "--tablet", "zz").returncode == 1


def test_tablets_offline(root):
    r = tserver("tablets", "--fs-root", str(root))
    assert r.returncode == 0 and r.stdout.startswith("t1\tREADY")


def test_start_refuses_corrupt_instance(root):
    data = bytearray((root / "instance").read_bytes())
    data[-1] ^= 0x01
    (root / "instance").write_bytes(bytes(data))
    # --insecure: a standalone server (this tests the fs root's checks, not security).
    r = tserver("start", "--fs-root", str(root), "--insecure")
    assert r.returncode == 1 and "corrupt instance file" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.integration
def test_tablets_live(root):
    from tests.tservers.procs import TServerProcess

    p = TServerProcess(root).start()
    try:
        r = tserver("tablets", "--address", p.address)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("t1\tREADY\tRUNNING")
    finally:
        p.stop()
