"""The tool decodes set_replication records (table, old and new factor, the record they
replace) and every other operation record type of coordinator.proto; `--table NAME` finds a
set_replication record although it carries only the table id (named from the table's other
records, by the name the table had at that point of the log), also in `--follow`.

The records are written by a real cluster (one coordinator, two tablet servers) through the
`coordinator` commands, and read offline from the node's data dir and live from its address.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

from coordinator.records import OP_DECODERS, RECORD_TYPES, RawEntry, decode_entry
from logcentric.client import Client
from optools import logtool
from rpc import credentials
from rpc.protocols import coordinator_pb2 as pb
from tests.support.cluster import local_cluster

from .conftest import items, run_tool


def test_every_operation_record_type_has_a_decoder():
    assert set(OP_DECODERS) | {"lease"} == set(RECORD_TYPES)
    for kind in RECORD_TYPES:
        record = pb.LogRecord()
        getattr(record, kind).SetInParent()
        v = decode_entry(RawEntry(1, record.SerializeToString(), (), True))
        assert v.type == kind and "not decoded" not in v.summary, v


def test_set_replication_fields():
    record = pb.LogRecord()
    sr = record.set_replication
    sr.header.CopyFrom(
        pb.OpHeader(op_id=30, request_id=pb.RequestId(client_id="cli", seq=4), phase=pb.DONE)
    )
    sr.table_id, sr.replication_factor, sr.old_replication_factor = "t9", 3, 1
    sr.previous_record_id = 20
    sr.superseded.add(request_id=pb.RequestId(client_id="cli", seq=1), table_id="t9")
    v = decode_entry(RawEntry(30, record.SerializeToString(), (20,), True))
    assert (v.type, v.op_id, v.phase, v.request_id) == ("set_replication", 30, "DONE", "cli/4")
    assert v.table_id == "t9" and v.summary == "rf=1->3 previous=20 superseded=cli/1"
    assert v.to_json()["table_id"] == "t9"


# ------------------------------------------------------------ records of a real cluster


def cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "optools.coordinator_cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, (out.stdout, out.stderr)
    return out.stdout


@dataclass
class History:
    coordinator: str
    data_dir: str
    table_id: str
    credentials: str  # the admin's: the local cluster is secure (the default)


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """users created with factor 1, set to 2, then 1, renamed people, set to 2."""
    with local_cluster(tmp_path_factory.mktemp("cluster"), coordinators=1, tservers=2) as c:
        address = c.spec.coordinators[0].rpc
        creds = str(c.spec.admin_credentials)
        at = ["--coordinators", address, "--credentials", creds]
        cli("create-table", "users", *at, "--columns", "id:int64:key", "--tablets", "2",
            "--replication", "1")  # fmt: skip
        cli("set-replication", "users", "2", *at, "--wait-s", "120")
        cli("set-replication", "users", "1", *at, "--wait-s", "120")
        with Client([address], timeout_s=60.0, credentials=creds) as client:
            client.alter_table("users", new_name="people")
        cli("set-replication", "people", "2", *at, "--wait-s", "120")
        (table_id,) = [t["id"] for t in json.loads(cli("tables", *at, "--json"))["tables"]]
        yield History(address, c.spec.coordinators[0].data, table_id, creds)


def records(text: str) -> list[dict]:
    return items(text)


def follow_records(text: str) -> list[dict]:
    """--follow --json: one record object per line."""
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def facts(r: dict) -> tuple:
    sr = r["record"]["set_replication"]
    old, new = sr.get("old_replication_factor", 0), sr.get("replication_factor", 0)
    return r["status"], r["table_id"], tuple(r["table_names"]), f"{old}->{new}"


@pytest.mark.integration
def test_offline_every_set_replication_record(history):
    t = history.table_id
    code, text = run_tool("--data-dir", history.data_dir, "--type", "set_replication", "--json")
    assert code == 0
    got = records(text)
    assert [facts(r) for r in got] == [
        ("invalidated", t, ("users",), "1->2"),
        ("invalidated", t, ("users",), "2->1"),
        ("live", t, ("people",), "1->2"),
    ]
    # Each replaces the one before: it names it and invalidates it.
    first, second, third = got
    assert second["invalidates"] == [first["id"]] and third["invalidates"] == [second["id"]]
    assert second["record"]["set_replication"]["previous_record_id"] == str(first["id"])
    assert all(r["phase"] == "DONE" and r["op_id"] == r["id"] for r in got)

    code, text = run_tool("--data-dir", history.data_dir, "--table", "users")
    lines = [x for x in text.splitlines() if " set_replication " in x]
    assert len(lines) == 2 and f"table={t}(users) rf=1->2" in lines[0], text
    assert f"table={t}(users) rf=2->1 previous={first['id']}" in lines[1], text
    code, text = run_tool("--data-dir", history.data_dir, "--table", "people", "--json")
    assert {r["type"] for r in records(text)} == {"alter_table", "set_replication"}
    code, text = run_tool("--data-dir", history.data_dir, "--table", t, "--json")
    assert [r["id"] for r in records(text) if r["type"] == "set_replication"] == [
        r["id"] for r in got
    ]


@pytest.mark.integration
def test_live_and_follow_name_the_table(history):
    admin = credentials.load(history.credentials)
    code, text = run_tool(
        "--address", history.coordinator, "--table", "people", "--json", credentials=admin
    )
    assert code == 0
    live = [r for r in records(text) if r["type"] == "set_replication"]
    assert [facts(r) for r in live] == [("live", history.table_id, ("people",), "1->2")]

    # --follow: a new record names the table from the records listed before it.
    out = io.StringIO()
    stop = threading.Event()
    argv = ["--address", history.coordinator, "--follow", "--json", "--interval-s", "0.1",
            "--type", "set_replication"]  # fmt: skip
    args = logtool.build_parser().parse_args(argv)
    args.credentials_obj = admin
    codes: list[int] = []
    follower = threading.Thread(
        target=lambda: codes.append(logtool.run(args, out=out, stop=stop)), name="log-follow"
    )
    follower.start()
    try:
        cli("set-replication", "people", "1", "--coordinators", history.coordinator,
            "--credentials", history.credentials, "--wait-s", "0")  # fmt: skip
        deadline = time.monotonic() + 30
        while not any(facts(r)[3] == "2->1" for r in follow_records(out.getvalue())):
            assert time.monotonic() < deadline, out.getvalue()
            time.sleep(0.1)
    finally:
        stop.set()
        follower.join(30)
    assert codes == [0]
    new = [r for r in follow_records(out.getvalue()) if facts(r)[3] == "2->1"]
    assert [facts(r)[1:] for r in new] == [(history.table_id, ("people",), "2->1")]
