"""Bounded retention of quarantined replicas (tservers/quarantine.py, design/tservers.md 4).

The decision is a pure function given the time (`plan`); the reaper is tried on real
directories whose mtimes the tests set with os.utime and with an explicit `now_s`; the
server and the `tserver quarantine` commands run as processes (ages there are days apart,
so no test depends on how long anything took).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from logcentric.tablets import TabletServerClient, column
from rpc.protocols.tserver_pb2 import DataState, OpType
from tests.support.cli import run_cli
from tests.support.procs import wait_for
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tests.tservers.procs import TServerProcess
from tservers import quarantine as q
from tservers.fs import FsLayout
from tservers.quarantine import Entry, Policy, QuarantineReaper, Reason, plan
from tservers.tablet.manager import TabletManager

DAY_S = 86_400.0
T0 = 1_000_000_000.0  # an arbitrary "now" for the pure function and for os.utime
WAIT_S = 30.0


def entry(name: str, size: int, mtime_s: float, removing: bool = False) -> Entry:
    return Entry(name, name.split(".", 1)[0], size, mtime_s, removing)


def names(removals) -> list[str]:
    return [r.entry.name for r in removals]


# ==================================================================== the pure decision
def test_expired_entries_are_removed_young_ones_kept():
    entries = [entry("a.1", 10, T0 - 2 * DAY_S), entry("b.1", 10, T0 - 60), entry("c.1", 10, T0)]
    out = plan(entries, Policy(retention_s=DAY_S, bytes_max=None), now_s=T0)
    assert names(out) == ["a.1"] and out[0].reason is Reason.EXPIRED
    # Exactly at the retention counts as old enough.
    out = plan([entry("a.1", 10, T0 - DAY_S)], Policy(retention_s=DAY_S, bytes_max=None), T0)
    assert names(out) == ["a.1"]


def test_retention_zero_removes_everything_even_from_the_future():
    entries = [entry("a.1", 10, T0 - 5), entry("b.1", 10, T0 + 3600)]  # clock set back
    out = plan(entries, Policy(retention_s=0, bytes_max=None), now_s=T0)
    assert names(out) == ["a.1", "b.1"]
    # With a retention, an mtime in the future counts as new.
    assert plan(entries[1:], Policy(retention_s=60, bytes_max=None), now_s=T0) == []


def test_byte_cap_removes_the_oldest_first_until_under_it():
    entries = [
        entry("new.1", 100, T0 - 10),
        entry("old.1", 100, T0 - 30),
        entry("mid.1", 100, T0 - 20),
        entry("mid.2", 100, T0 - 20),
    ]
    out = plan(entries, Policy(retention_s=None, bytes_max=250), now_s=T0)
    assert names(out) == ["old.1", "mid.1"]  # 400 -> 200; ties broken by name
    assert {r.reason for r in out} == {Reason.OVER_CAP}
    assert plan(entries, Policy(retention_s=None, bytes_max=400), now_s=T0) == []
    assert len(plan(entries, Policy(retention_s=None, bytes_max=0), now_s=T0)) == 4


def test_expired_entries_no_longer_count_against_the_cap():
    entries = [entry("a.1", 500, T0 - 2 * DAY_S), entry("b.1", 100, T0 - 20), entry("c.1", 100, T0)]
    out = plan(entries, Policy(retention_s=DAY_S, bytes_max=150), now_s=T0)
    assert [(r.entry.name, r.reason) for r in out] == [
        ("a.1", Reason.EXPIRED),
        ("b.1", Reason.OVER_CAP),
    ]


def test_busy_tablets_are_kept_but_counted():
    entries = [
        entry("busy.1", 300, T0 - 3 * DAY_S),
        entry("busy.2", 300, T0),
        entry("idle.1", 100, T0 - 10),
    ]
    policy = Policy(retention_s=DAY_S, bytes_max=500)
    out = plan(entries, policy, now_s=T0, busy_tablets=frozenset({"busy"}))
    # busy.1 is old and busy.2 passes the cap with the rest: neither is touched; the
    # other tablet's entry goes, the total being over the cap.
    assert [(r.entry.name, r.reason) for r in out] == [("idle.1", Reason.OVER_CAP)]
    assert names(plan(entries, policy, now_s=T0)) == ["busy.1"]


def test_unfinished_removals_go_first_whatever_else():
    entries = [
        entry("a.1", 10, T0 - 3 * DAY_S),
        entry("b.1.removing", 10, T0, removing=True),
        entry("a.2.removing", 10, T0 + 5, removing=True),
    ]
    out = plan(entries, Policy(retention_s=DAY_S, bytes_max=None), T0, frozenset({"a", "b"}))
    assert [(r.entry.name, r.reason) for r in out] == [
        ("b.1.removing", Reason.UNFINISHED),
        ("a.2.removing", Reason.UNFINISHED),
    ]
    out = plan(entries, Policy(retention_s=None, bytes_max=None), T0)
    assert names(out) == ["b.1.removing", "a.2.removing"]  # no limits: only unfinished


def test_formatting_for_people():
    assert q.format_bytes(0) == "0 B" and q.format_bytes(1_500_000) == "1.5 MB"
    assert q.format_age(-3) == "0 s" and q.format_age(90) == "90 s"
    assert q.format_age(3 * DAY_S) == "3.0 d" and q.format_age(5400) == "90 min"


# ==================================================================== real directories
def make_entry(root: Path, name: str, mtime_s: float, size: int = 10_000) -> Path:
    d = root / name
    (d / "data").mkdir(parents=True)
    (d / "data" / "block-000000001.arrow").write_bytes(b"x" * size)
    (d / "superblock").write_bytes(b"sb")
    os.utime(d, (mtime_s, mtime_s))
    return d


def test_scan_reads_names_sizes_and_mtimes(tmp_path):
    make_entry(tmp_path, "t1.2", T0 - 10)
    make_entry(tmp_path, "t1.1", T0 - 20, size=100_000)
    make_entry(tmp_path, "t2.1.removing", T0 - 5)
    (tmp_path / "not-an-entry").mkdir()
    (tmp_path / "t3.1").write_bytes(b"a file, not a directory")
    found = q.scan(tmp_path)
    assert [e.name for e in found] == ["t1.1", "t1.2", "t2.1.removing"]  # oldest first
    assert [e.tablet_id for e in found] == ["t1", "t1", "t2"]
    assert [e.removing for e in found] == [False, False, True]
    assert found[0].mtime_s == T0 - 20
    assert found[0].size_bytes >= 100_000 > found[1].size_bytes >= 10_000
    assert q.scan(tmp_path / "missing") == []


def test_reaper_removes_expired_entries_and_logs_each(tmp_path, caplog):
    make_entry(tmp_path, "t1.1", T0 - 2 * DAY_S, size=50_000)
    make_entry(tmp_path, "t2.1", T0 - 60)
    reaper = QuarantineReaper(tmp_path, Policy(retention_s=DAY_S, bytes_max=None))
    with caplog.at_level(logging.INFO, logger="tservers.quarantine"):
        done = reaper.run_once(now_s=T0)
    assert [(r.entry.name, err) for r, err in done] == [("t1.1", None)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t2.1"]
    lines = [r.getMessage() for r in caplog.records if "removed" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "t1.1" in lines[0] and "tablet t1" in lines[0] and "2.0 d old" in lines[0]
    assert "kB" in lines[0]  # the size
    assert reaper.removed_entries == 1 and reaper.removed_bytes >= 50_000
    # A day later the other one goes too.
    assert names(r for r, _ in reaper.run_once(now_s=T0 + DAY_S)) == ["t2.1"]
    assert list(tmp_path.iterdir()) == []


def test_reaper_keeps_the_entries_of_a_deletion_in_progress(tmp_path):
    make_entry(tmp_path, "t1.1", T0 - 3 * DAY_S)
    reaper = QuarantineReaper(tmp_path, Policy(retention_s=0, bytes_max=None))
    with reaper.filling("t1"):
        assert reaper.run_once(now_s=T0) == []
        assert (tmp_path / "t1.1").is_dir()
    assert names(r for r, _ in reaper.run_once(now_s=T0)) == ["t1.1"]


def test_a_failed_removal_warns_and_is_finished_by_a_later_pass(tmp_path, caplog, monkeypatch):
    make_entry(tmp_path, "t1.1", T0 - 2 * DAY_S)
    reaper = QuarantineReaper(tmp_path, Policy(retention_s=DAY_S, bytes_max=None))

    def refuse(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(q, "_delete_tree", refuse)
    with caplog.at_level(logging.INFO, logger="tservers.quarantine"):
        done = reaper.run_once(now_s=T0)
    assert len(done) == 1 and isinstance(done[0][1], PermissionError)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "t1.1" in warnings[0].getMessage()
    assert "Permission denied" in warnings[0].getMessage()
    assert reaper.failures == 1 and reaper.removed_entries == 0
    # Decided once, gone for good: renamed aside, and finished by the next pass.
    assert [p.name for p in tmp_path.iterdir()] == ["t1.1.removing"]
    monkeypatch.undo()
    done = reaper.run_once(now_s=T0)
    assert [(r.entry.name, r.reason, err) for r, err in done] == [
        ("t1.1.removing", Reason.UNFINISHED, None)
    ]
    assert list(tmp_path.iterdir()) == []


def _manager(root: Path, policy: Policy) -> TabletManager:
    fs = FsLayout.format(root)
    m = TabletManager(fs, maintenance=False, quarantine_policy=policy)
    m.open()
    return m


def test_a_deletion_is_reclaimed_at_once_with_retention_zero(tmp_path, caplog):
    m = _manager(tmp_path / "root", Policy(retention_s=0, bytes_max=None))
    qroot = m.fs.quarantine_root
    try:
        with caplog.at_level(logging.INFO, logger="tservers.quarantine"):
            t = create(m)
            t.write(1, [(OpType.INSERT, ipc(six_rows(range(1000))))], deadline())
            m.delete_tablet("t1")

            def reaped() -> bool:
                # The reaper logs the removal just after it: wait for both (on a loaded
                # machine the directory was seen empty before the line was logged).
                said = any("removed t1.1 (tablet t1" in r.getMessage() for r in caplog.records)
                return said and not any(qroot.iterdir())

            wait_for(reaped, WAIT_S, "the quarantine to empty, the removal logged")
        assert m.fs.read_superblock("t1").data_state == DataState.DELETED  # tombstone kept
        # The server runs on: the tablet is created again over its tombstone, and deleted.
        create(m).write(1, [(OpType.INSERT, ipc(six_rows([7])))], deadline())
        m.delete_tablet("t1")
        wait_for(lambda: not any(qroot.iterdir()), WAIT_S, "the second deletion's removal")
    finally:
        m.close()


def test_a_deletion_is_kept_for_the_retention(tmp_path):
    """A deletion leaves a whole directory, which a reaper removes once its mtime is a
    retention old (set here to a known time, and looked at by a reaper of its own once the
    server's stopped: the server's own one counts with the real clock)."""
    root = tmp_path / "root"
    m = open_manager(root)  # the default policy: a day, 10 GiB
    try:
        create(m).write(1, [(OpType.INSERT, ipc(six_rows(range(100))))], deadline())
        m.delete_tablet("t1")
    finally:
        m.close()
    qroot = root / "quarantine"
    qdir = qroot / "t1.1"
    assert {p.name for p in qdir.iterdir()} == {"superblock", "consensus-meta", "data", "wal"}
    os.utime(qdir, (T0, T0))
    reaper = QuarantineReaper(qroot, Policy(retention_s=DAY_S, bytes_max=None))
    assert reaper.run_once(now_s=T0 + DAY_S - 1) == []
    assert names(r for r, _ in reaper.run_once(now_s=T0 + DAY_S)) == ["t1.1"]
    assert not qdir.exists()


# ==================================================================== processes
def tserver(*args: str) -> subprocess.CompletedProcess:
    return run_cli("tservers.cli", *args, timeout_s=60.0)


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 1, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tserver: error: "), r.stderr
    return lines[0]


@pytest.fixture
def two_entries(tmp_path) -> Path:
    """A stopped server's root holding t1.1 (three days old) and t1.2 (a minute old)."""
    root = tmp_path / "root"
    m = open_manager(root)
    for rows in (range(2000), range(10)):
        create(m).write(1, [(OpType.INSERT, ipc(six_rows(rows)))], deadline())
        m.delete_tablet("t1")
    m.close()
    qroot = root / "quarantine"
    now_s = time.time()  # the command reads ages with time.time(): days apart from these
    os.utime(qroot / "t1.1", (now_s - 3 * DAY_S, now_s - 3 * DAY_S))
    os.utime(qroot / "t1.2", (now_s - 60, now_s - 60))
    return root


def listed(root: Path) -> list[dict]:
    r = tserver("quarantine", "list", "--fs-root", str(root), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.integration
def test_quarantine_list(two_entries):
    entries = listed(two_entries)
    assert [e["name"] for e in entries] == ["t1.1", "t1.2"]
    assert all(e["tablet_id"] == "t1" and not e["removing"] for e in entries)
    assert entries[0]["size_bytes"] > entries[1]["size_bytes"] > 0
    assert 2 * DAY_S < entries[0]["age_s"] < 4 * DAY_S and entries[1]["age_s"] < DAY_S
    text = tserver("quarantine", "list", "--fs-root", str(two_entries))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].startswith("t1.1\t") and lines[0].endswith(" d old"), lines
    assert lines[1].startswith("t1.2\t") and lines[1].endswith(" old"), lines
    assert lines[2].startswith("2 entries, "), lines
    missing = tserver("quarantine", "list", "--fs-root", str(two_entries.parent / "nope"))
    assert "not formatted" in one_line_error(missing)


@pytest.mark.integration
def test_quarantine_purge(two_entries):
    root = str(two_entries)
    r = tserver("quarantine", "purge", "--fs-root", root)  # the defaults: older than a day
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("removed t1.1\t") and "older than the retention" in lines[0]
    assert lines[-1].startswith("removed 1 entries") and "1 left" in lines[-1], lines
    assert [e["name"] for e in listed(two_entries)] == ["t1.2"]
    r = tserver("quarantine", "purge", "--fs-root", root, "--older-than-s", str(DAY_S))
    assert r.returncode == 0 and r.stdout.startswith("removed 0 entries"), r.stdout
    r = tserver("quarantine", "purge", "--fs-root", root, "--bytes-max", "0")
    assert r.returncode == 0 and "removed t1.2\t" in r.stdout and "over the byte cap" in r.stdout
    assert listed(two_entries) == []
    empty = tserver("quarantine", "list", "--fs-root", root)
    assert empty.stdout.strip() == "quarantine is empty"
    # The tombstone is what remains of the tablet; the server still opens the root.
    m = open_manager(two_entries)
    try:
        assert m.fs.read_superblock("t1").data_state == DataState.DELETED
    finally:
        m.close()


@pytest.mark.integration
def test_quarantine_purge_refused_while_the_server_runs(two_entries):
    root = str(two_entries)
    # A server with default flags removes the three-day-old entry at startup by itself.
    p = TServerProcess(two_entries).start()
    try:
        wait_for(lambda: not (two_entries / "quarantine" / "t1.1").exists(), WAIT_S, "t1.1 gone")
        line = one_line_error(tserver("quarantine", "purge", "--fs-root", root, "--all"))
        assert "refusing to purge" in line and "in use by another process" in line, line
        assert [e["name"] for e in listed(two_entries)] == ["t1.2"]  # reading is allowed
        assert p.terminate() == 0
    finally:
        p.stop()
    log = p.err_path.read_text()
    assert "quarantine: removed t1.1 (tablet t1, " in log and " d old" in log, log
    r = tserver("quarantine", "purge", "--fs-root", root, "--all")
    assert r.returncode == 0 and "removed t1.2\t" in r.stdout, r.stderr
    assert listed(two_entries) == []


@pytest.mark.integration
def test_server_with_retention_zero_reclaims_each_deletion(tmp_path):
    root = tmp_path / "root"
    FsLayout.format(root)
    p = TServerProcess(root, extra_args=["--quarantine-retention-s", "0"]).start()
    qroot = root / "quarantine"
    try:
        with TabletServerClient(p.address) as c:
            for _ in range(2):
                c.create_tablet("t1", [column("id", "int64", key=True)])
                c.delete_tablet("t1")
                wait_for(lambda: not any(qroot.iterdir()), WAIT_S, "the quarantine to empty")
        assert p.terminate() == 0
    finally:
        p.stop()
    removed = [
        line for line in p.err_path.read_text().splitlines() if "quarantine: removed" in line
    ]
    assert len(removed) == 2 and all("(tablet t1, " in line for line in removed), removed


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("start", "--fs-root", "R", "--quarantine-retention-s", "-1"), "must be 0 or above"),
        (("start", "--fs-root", "R", "--quarantine-bytes-max", "10X"), "not a size in bytes"),
        (("quarantine", "purge", "--fs-root", "R", "--all", "--older-than-s", "5"), "not allowed"),
    ],
)
def test_bad_quarantine_flags_are_usage_errors(tmp_path, args, says):
    r = tserver(*(str(tmp_path) if a == "R" else a for a in args))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert says in r.stderr.strip().splitlines()[-1], r.stderr


def test_byte_counts_take_binary_suffixes():
    from tservers.cli import _byte_count

    assert _byte_count("0") == 0 and _byte_count("512") == 512
    assert _byte_count("10G") == _byte_count("10GiB") == 10 << 30
    assert _byte_count("3m") == 3 << 20
