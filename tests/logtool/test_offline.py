"""The tool on real data dirs: a replica stopped after a real history (journal only), one
compacted (snapshot + journal tail), one damaged, and one read while it is running."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections import Counter

import pytest

from logstore.journal import encode_record
from optools import logtool
from tests.logstore.helpers import wait_for

from .builder import A_UUID, B_ADDR, B_UUID, GARBAGE, Expected, Writer, build_history, lease
from .conftest import NODE_UUID, items, one_doc, open_replica, run_tool

pytestmark = pytest.mark.integration


def json_lines(text: str) -> list[dict]:
    """The records (or epochs, or pending operations) of a --json run's one document."""
    return items(text)


def test_lists_every_record_with_live_and_invalidated(offline):
    exp = offline.expected
    code, text = run_tool("--data-dir", str(offline.node_dir), "--json")
    assert code == 0
    recs = json_lines(text)
    assert [r["id"] for r in recs] == list(range(1, exp.last_id + 1))
    for r in recs:
        i = r["id"]
        assert r["type"] == exp.types[i], r
        assert r["size_bytes"] == exp.sizes[i]
        if i in exp.live:
            assert r["status"] == "live" and r["invalidated_by"] is None
        else:
            assert r["status"] == "invalidated"
            assert r["invalidated_by"] == exp.invalidated.get(i), r
        assert r["source"] == "journal" and r["committed"] is True
    garbage = recs[exp.ids["garbage"] - 1]
    assert garbage["type"] == "undecodable" and garbage["error"]
    done = recs[exp.ids["users_done"] - 1]
    assert done["invalidates"] == [exp.ids["users_started"]]
    assert done["table_id"] == f"t{exp.ids['users_started']}" and done["phase"] == "DONE"
    assert done["servers"] == ["ts-1", "ts-2", "ts-3"]


def test_text_output_names_each_record(offline):
    exp = offline.expected
    code, text = run_tool("--data-dir", str(offline.node_dir))
    assert code == 0
    lines = text.splitlines()
    assert len(lines) == exp.last_id
    started = lines[exp.ids["users_started"] - 1]
    assert started.startswith(
        f"#{exp.ids['users_started']} invalidated by #{exp.ids['users_done']}"
    )
    assert "create_table STARTED" in started and "table=t" in started and "(users)" in started
    assert "undecodable" in lines[exp.ids["garbage"] - 1]
    assert "never-live invalidation" in lines[exp.ids["inval_only"] - 1]


def test_summary_counts(offline):
    exp = offline.expected
    code, text = run_tool("--data-dir", str(offline.node_dir), "--summary", "--json")
    assert code == 0
    (s,) = json_lines(text)
    live = Counter(exp.types[i] for i in exp.live)
    held = Counter(exp.types.values())
    for t, row in s["by_type"].items():
        assert row["live"] == live[t], t
        assert row["live"] + row["invalidated_held"] == held[t], t
        assert row["live_bytes"] == sum(exp.sizes[i] for i in exp.live if exp.types[i] == t)
        assert row["live_bytes"] + row["invalidated_held_bytes"] == sum(
            exp.sizes[i] for i in exp.types if exp.types[i] == t
        )
    assert s["live"] == len(exp.live) and s["invalidated"] == exp.last_id - len(exp.live)
    assert s["invalidated_held"] == s["invalidated"] and s["source"]["kind"] == "data_dir"
    assert s["last_id"] == exp.last_id and s["gone_ids"] == 0
    assert s["pending_operations"] == 1 and s["epochs"] == 2
    # Live undecodable records only; the invalidated one counts among the held ones by type.
    assert s["undecodable"] == 1 and s["by_type"]["undecodable"]["invalidated_held"] == 1
    assert s["source"]["node_uuid"] == NODE_UUID
    assert s["source"]["raft_commands"]["append"] == exp.last_id
    code, text = run_tool("--data-dir", str(offline.node_dir), "--summary")
    assert code == 0 and f"last id {exp.last_id}" in text and NODE_UUID in text


def test_pending(offline):
    exp = offline.expected
    code, text = run_tool("--data-dir", str(offline.node_dir), "--pending", "--json")
    assert code == 0
    assert [r["id"] for r in json_lines(text)] == [exp.ids["events_started"]]
    code, text = run_tool("--data-dir", str(offline.node_dir), "--pending")
    assert text.startswith("1 pending operation")


def test_leases(offline):
    exp = offline.expected
    code, text = run_tool("--data-dir", str(offline.node_dir), "--leases", "--json")
    assert code == 0
    e1, e2 = json_lines(text)
    assert (e1["epoch"], e1["holder_uuid"], e1["ended_by"]) == (
        exp.ids["takeover_a"],
        A_UUID,
        exp.ids["takeover_b"],
    )
    assert e1["renewals_seen"] == 3 and e1["takeover_live"]
    assert (e2["epoch"], e2["holder_uuid"], e2["ended_by"]) == (exp.ids["takeover_b"], B_UUID, None)
    assert e2["last_record_id"] == exp.last_id
    code, text = run_tool("--data-dir", str(offline.node_dir), "--leases")
    assert "2 epoch(s)" in text and "current" in text


@pytest.mark.parametrize(
    "argv, names",
    [
        (
            ["--type", "create_table"],
            ["users_started", "users_done", "orders_started", "orders_done", "events_started"],
        ),
        (
            ["--type", "CreateTable,DropTable", "--live-only"],
            ["drop_done", "orders_done", "events_started"],
        ),
        (["--table", "users"], ["users_started", "users_done", "alter_started", "alter_done"]),
        (["--table", "orders"], ["orders_started", "orders_done"]),
        (
            ["--server", "ts-2"],
            [
                "enlist_1",
                "users_started",
                "users_done",
                "alter_started",
                "alter_done",
                "drop_started",
                "drop_done",
                "orders_started",
                "orders_done",
                "events_started",
            ],
        ),
        (["--type", "undecodable"], ["garbage", "junk"]),
        (["--type", "lease", "--server", "c2-bbbb"], ["takeover_b", "renew_b1"]),
    ],
)
def test_filters(offline, argv, names):
    exp = offline.expected
    code, text = run_tool("--data-dir", str(offline.node_dir), "--json", *argv)
    assert code == 0
    assert [r["id"] for r in json_lines(text)] == [exp.ids[n] for n in names]


def test_filter_by_operation_and_table_id(offline):
    exp = offline.expected
    op = exp.ids["users_started"]
    code, text = run_tool("--data-dir", str(offline.node_dir), "--json", "--op", str(op))
    assert [r["id"] for r in json_lines(text)] == [op, exp.ids["users_done"]]
    code, text = run_tool("--data-dir", str(offline.node_dir), "--json", "--table", f"t{op}")
    assert len(json_lines(text)) == 6  # create, alter and drop: STARTED and DONE each


def test_bad_flags_and_missing_dir(tmp_path, capsys):
    code, _ = run_tool("--data-dir", str(tmp_path), "--type", "nope")
    assert code == 2 and "unknown --type" in capsys.readouterr().err
    code, _ = run_tool("--data-dir", str(tmp_path / "absent"))
    assert code == 1 and "no such directory" in capsys.readouterr().err
    code, _ = run_tool("--data-dir", str(tmp_path))
    assert code == 1 and "no logstore journal or snapshot" in capsys.readouterr().err
    code, _ = run_tool("--data-dir", str(tmp_path), "--op", "x")
    assert code == 2
    with pytest.raises(SystemExit):
        logtool.build_parser().parse_args(["--data-dir", "x", "--interval-s", "0"])


def test_compacted_shows_gone_ids_snapshot_and_tail(compacted):
    exp = compacted.expected
    code, text = run_tool("--data-dir", str(compacted.node_dir), "--json")
    assert code == 0
    recs = json_lines(text)
    held = {r["id"]: r for r in recs if r["type"] != "gone"}
    gone = [r for r in recs if r["type"] == "gone"]
    # Every live entry is held; invalidated ones before the snapshot are gone.
    assert exp.live <= set(held)
    for i in exp.live:
        assert held[i]["status"] == "live" and held[i]["type"] == exp.types[i]
    gone_ids = {i for g in gone for i in range(g["id"], g["id_to"] + 1)}
    assert gone_ids == set(range(1, exp.last_id + 1)) - set(held)
    assert gone_ids and all(i not in exp.live for i in gone_ids)
    for g in gone:  # whoever invalidated them is named when a held record says so
        if g["invalidated_by"]:
            assert all(
                exp.invalidated[i] == g["invalidated_by"] for i in range(g["id"], g["id_to"] + 1)
            )
    # The record written after the snapshot comes from the journal; it invalidated a
    # renewal that the snapshot held.
    tail = held[exp.ids["renew_b2"]]
    assert tail["source"] == "journal" and tail["status"] == "live"
    renew = held[exp.ids["renew_b1"]]
    assert renew["source"] == "snapshot" and renew["status"] == "invalidated"
    assert renew["invalidated_by"] == exp.ids["renew_b2"]
    code, text = run_tool("--data-dir", str(compacted.node_dir), "--summary", "--json")
    (s,) = json_lines(text)
    assert s["gone_ids"] == len(gone_ids) and s["live"] == len(exp.live)
    assert s["invalidated"] == exp.last_id - len(exp.live)
    assert s["source"]["snapshot_raft_index"] > 0
    code, text = run_tool("--data-dir", str(compacted.node_dir), "--pending", "--json")
    assert [r["id"] for r in json_lines(text)] == [exp.ids["events_started"]]
    code, text = run_tool("--data-dir", str(compacted.node_dir), "--leases", "--json")
    assert [e["epoch"] for e in json_lines(text)] == [exp.ids["takeover_a"], exp.ids["takeover_b"]]
    code, text = run_tool("--data-dir", str(compacted.node_dir))
    assert " gone (invalidated" in text


def test_damaged_journal_tail_and_undecodable_command(offline, tmp_path, capsys):
    """A torn tail and a Raft command that is not logstore's are reported, not fatal."""
    copy = tmp_path / "node"
    shutil.copytree(offline.node_dir, copy)
    journal = copy / "logstore" / "journal"
    with open(journal, "ab") as f:
        f.write(encode_record(b"\x00" + GARBAGE, 10_000, 1))
    # A record with a non-contiguous index is damage that is not a torn tail: logstore's
    # reader refuses the journal; the tool says so and answers from what it could read
    # (here: no snapshot, so nothing).
    code, text = run_tool("--data-dir", str(copy), "--summary", "--json")
    assert code == logtool.EXIT_INCOMPLETE and json_lines(text)[0]["source"]["incomplete"]
    assert "journal not read" in capsys.readouterr().err
    # Now a well-placed record whose command does not unpickle, then a torn tail.
    shutil.rmtree(copy)
    shutil.copytree(offline.node_dir, copy)
    last_index = json_lines(run_tool("--data-dir", str(copy), "--summary", "--json")[1])[0][
        "source"
    ]["journal_last_index"]
    with open(journal, "ab") as f:
        f.write(encode_record(b"\x00" + GARBAGE, last_index + 1, 1))
        f.write(b"\x10\x00\x00\x00torn")
    code, text = run_tool("--data-dir", str(copy), "--json")
    assert code == logtool.EXIT_INCOMPLETE
    assert len(json_lines(text)) == offline.expected.last_id
    err = capsys.readouterr().err
    assert "does not unpickle" in err and "torn" in err


def test_damaged_journal_meta_and_a_mistyped_log_name(offline, tmp_path, capsys):
    """A journal meta that does not decode leaves the entries' committed flags unknown:
    exit 3 with a warning, the records still listed. A log name the dir does not hold is
    warned about (it would read like an empty log) with the names it does hold."""
    copy = tmp_path / "node"
    shutil.copytree(offline.node_dir, copy)
    (copy / "logstore" / "journal.meta").write_bytes(b"garbage")
    code, text = run_tool("--data-dir", str(copy), "--json")
    assert code == logtool.EXIT_INCOMPLETE
    recs = json_lines(text)
    assert len(recs) == offline.expected.last_id
    assert all(r["committed"] is None for r in recs)
    assert "committed is unknown" in capsys.readouterr().err
    code, text = run_tool("--data-dir", str(offline.node_dir), "--log", "coordinatr")
    assert code == 0 and text == ""
    assert "no log named 'coordinatr' here; its logs: coordinator" in capsys.readouterr().err


def test_reads_a_running_replica_and_follows(tmp_path):
    """--follow on the data dir of a replica that keeps appending and compacts (the tool
    never writes)."""
    node_dir = tmp_path / "node"
    store = open_replica(node_dir)
    try:
        exp = build_history(store)
        out = _LockedBuffer()
        stop = threading.Event()
        args = logtool.build_parser().parse_args(
            [
                "--data-dir",
                str(node_dir),
                "--follow",
                "--renewals",
                "--json",
                "--interval-s",
                "0.05",
            ]  # fmt: skip
        )
        codes: list[int] = []
        t = threading.Thread(target=lambda: codes.append(logtool.run(args, out=out, stop=stop)))
        t.start()
        try:
            wait_for(lambda: len(out.lines()) >= exp.last_id, what="the initial listing")
            w = Writer(store, exp)
            w.record(
                "more", lease(B_UUID, "x:1", exp.ids["takeover_b"], False), (exp.ids["renew_b1"],)
            )
            wait_for(
                lambda: any(json.loads(x)["id"] == exp.ids["more"] for x in out.lines()),
                what="the new record",
            )
            # The replica snapshots and trims its journal under the follower's feet.
            store.force_compaction()
            wait_for(lambda: store.status()["snapshots_written"] >= 1, what="a snapshot")
            wait_for(lambda: store.status()["journal_first_index"] > 10, what="a trim")
            w.record(
                "after_snapshot",
                lease(B_UUID, "x:1", exp.ids["takeover_b"], False),
                (exp.ids["more"],),
            )
            wait_for(
                lambda: any(json.loads(x)["id"] == exp.ids["after_snapshot"] for x in out.lines()),
                what="the record appended after the snapshot",
            )
        finally:
            stop.set()
            t.join(10)
        assert codes == [0]
        ids = [json.loads(x)["id"] for x in out.lines()]
        assert ids == list(range(1, exp.last_id + 1))  # each once, in order
    finally:
        store.close()


class _LockedBuffer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: list[str] = []

    def write(self, s: str) -> int:
        with self._lock:
            self._parts.append(s)
        return len(s)

    def flush(self) -> None:
        pass

    def lines(self) -> list[str]:
        with self._lock:
            return [x for x in "".join(self._parts).splitlines() if x.strip()]


def test_command_line_process(offline):
    """As a process: exit codes, no traceback, output through a closed pipe."""
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    cmd = [sys.executable, "-m", "optools.logtool"]
    p = subprocess.run(
        [*cmd, "--data-dir", str(offline.node_dir), "--summary"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0 and "last id" in p.stdout
    p = subprocess.run(
        [*cmd, "--data-dir", "/nonexistent/dir"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 1 and "Traceback" not in p.stderr and "no such directory" in p.stderr
    p = subprocess.run([*cmd, "--help"], capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0 and "--pending" in p.stdout


def test_verbose_prints_the_whole_record(offline):
    exp = offline.expected
    code, text = run_tool(
        "--data-dir", str(offline.node_dir), "-v", "--op", str(exp.ids["events_started"])
    )
    assert code == 0
    head, record = text.splitlines()
    assert head.startswith(f"#{exp.ids['events_started']} live create_table STARTED")
    assert json.loads(record)["create_table"]["name"] == "events"


def test_corrupt_snapshot_is_an_error_not_a_crash(compacted, tmp_path, capsys):
    copy = tmp_path / "node"
    shutil.copytree(compacted.node_dir, copy)
    snap = copy / "logstore" / "snapshot"
    data = bytearray(snap.read_bytes())
    data[len(data) // 2] ^= 0x40
    snap.write_bytes(bytes(data))
    code, text = run_tool("--data-dir", str(copy))
    assert code == 1 and text == ""
    assert "CRC" in capsys.readouterr().err


def test_batched_appends_show_as_separate_records(tmp_path):
    """Appends coalesced by logstore into one Raft entry (method 2, `_ls_batch`) are
    replayed one by one: each is its own record with its own id and outcome."""
    from optools.logtool_source import load_data_dir

    node_dir = tmp_path / "node-batched"
    node_dir.mkdir()
    with open_replica(node_dir) as store:
        first = store.append("batched", b"one")
        futures: list = []
        ready = threading.Event()

        def task() -> None:  # runs on the tick thread, so all four share one command
            try:
                futures.append(store.append_async("batched", b"two", first + 1))
                futures.append(store.append_async("batched", b"stale", first + 1))
                futures.append(store.append_async("batched", b"", None, [first]))
                futures.append(store.append_async("other", b"x"))
            finally:
                ready.set()

        store._node.ls_run_on_tick(task)
        assert ready.wait(10.0)
        results = []
        for f in futures:
            try:
                results.append(f.result(10.0))
            except Exception as err:  # noqa: BLE001
                results.append(type(err).__name__)
        assert results == [2, "LogConditionFailed", 3, 1]
    image = load_data_dir(str(node_dir), "batched")
    assert [(e.id, e.data, e.invalidates, e.live) for e in image.entries] == [
        (1, b"one", (), False),
        (2, b"two", (), True),
        (3, b"", (1,), False),
    ]
    assert image.invalidated_by == {1: 3}
    raft_indexes = {e.id: e.raft_index for e in image.entries}
    assert raft_indexes[2] == raft_indexes[3] != raft_indexes[1]
    stats = image.stats
    assert stats.raft_commands["append_batch"] == 1
    assert stats.raft_commands["append"] == 5
    assert stats.rejected_appends["batched:condition"] == 1


def test_follow_hides_renewals_and_says_how_many(tmp_path):
    """--follow without --renewals: no renewal is printed (takeovers and other records are),
    and the "(N lease renewals hidden ...)" lines add up to the renewals it read."""
    node_dir = tmp_path / "node"
    store = open_replica(node_dir)
    try:
        exp = build_history(store)
        renewals_before = sum(1 for n in exp.ids if n.startswith("renew"))
        out = _LockedBuffer()
        stop = threading.Event()
        args = logtool.build_parser().parse_args(
            ["--data-dir", str(node_dir), "--follow", "--interval-s", "0.05"]
        )
        codes: list[int] = []
        t = threading.Thread(target=lambda: codes.append(logtool.run(args, out=out, stop=stop)))
        t.start()
        try:
            wait_for(
                lambda: any(ln.startswith(f"#{exp.ids['events_started']} ") for ln in out.lines()),
                what="the initial listing",
            )
            w = Writer(store, exp)
            takeover_b = exp.ids["takeover_b"]
            r = w.record("r1", lease(B_UUID, B_ADDR, takeover_b, False), (exp.ids["renew_b1"],))
            r = w.record("r2", lease(B_UUID, B_ADDR, takeover_b, False), (r,))
            w.record("takeover_c", lease(A_UUID, "127.0.0.1:7102", 0, True), (r,))
            wait_for(
                lambda: any(ln.startswith(f"#{exp.ids['takeover_c']} ") for ln in out.lines()),
                what="the takeover after two renewals",
            )
        finally:
            stop.set()
            t.join(10)
        assert codes == [0]
        lines = out.lines()
        assert not [ln for ln in lines if " renewal epoch=" in ln], lines
        assert sum(" takeover epoch=" in ln for ln in lines) == 3  # a, b, c
        notes = [ln for ln in lines if ln.startswith("(")]
        hidden = sum(int(n.split()[0][1:]) for n in notes)
        # A data dir's journal holds every renewal, invalidated or not.
        assert hidden == renewals_before + 2, notes
        assert notes[-1] == lines[-1] and "--renewals shows them" in notes[-1]
    finally:
        store.close()


def test_every_json_is_one_document_even_when_empty(tmp_path):
    """Nothing pending, nothing matching: still one JSON document, with an empty list."""
    node_dir = tmp_path / "node"
    with open_replica(node_dir) as store:
        Writer(store, Expected()).record("takeover", lease(A_UUID, "127.0.0.1:7100", 0, True))
    d = str(node_dir)
    code, text = run_tool("--data-dir", d, "--pending", "--json")
    assert code == 0 and one_doc(text) == {"log": "coordinator", "last_id": 1, "pending": []}
    code, text = run_tool("--data-dir", d, "--type", "server_down", "--json")
    assert code == 0 and one_doc(text) == {"log": "coordinator", "last_id": 1, "records": []}
    code, text = run_tool("--data-dir", d, "--leases", "--json")
    (epoch,) = one_doc(text)["epochs"]
    # A record written without a wall-clock time (as before lease records carried one).
    assert epoch["taken_over_at"] is None and epoch["lease_records"][0]["written_at"] is None
    code, text = run_tool("--data-dir", d, "--leases")
    assert "taken over at -," in text
    code, text = run_tool("--data-dir", d, "--summary", "--json")
    assert one_doc(text)["live"] == 1
