"""The replication admin commands parse their arguments (no cluster needed)."""

from __future__ import annotations

import argparse

import pytest

from optools import admin


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="coordinator")
    admin.add_commands(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def test_move_replica_arguments():
    args = parse("move-replica", "t5-0", "--from", "a", "--to", "b", "--coordinators", "h:1")
    assert (args.tablet, args.from_uuid, args.to_uuid) == ("t5-0", "a", "b")
    assert args.func is admin.cmd_move_replica and args.wait_s > 0
    args = parse("move-replica", "t5-0", "--from", "a", "--coordinators", "h:1,h:2")
    assert args.to_uuid is None and args.coordinators == ["h:1", "h:2"]


def test_retire_and_set_replication_arguments():
    args = parse("retire-tserver", "u1", "--coordinators", "h:1", "--wait-s", "0")
    assert (args.uuid, args.wait_s, args.func) == ("u1", 0.0, admin.cmd_retire_tserver)
    args = parse("set-replication", "tbl", "2", "--coordinators", "h:1")
    assert (args.table, args.factor, args.func) == ("tbl", 2, admin.cmd_set_replication)
    assert parse("create-table", "x", "--columns", "id:int64:key",
                 "--coordinators", "h:1").replication == 0  # fmt: skip


def test_missing_source_is_a_usage_error():
    with pytest.raises(SystemExit):
        parse("move-replica", "t5-0", "--coordinators", "h:1")


def test_describe_marks_down_and_non_voter_replicas():
    def r(leader, state="LIVE", member="VOTER"):
        return {"address": "h:1", "leader": leader, "server_state": state, "member_type": member}

    assert admin._replica_text(r(True)) == "h:1*"
    assert admin._replica_text(r(False)) == "h:1"
    # A leader reported before its server went DOWN is not shown as the leader.
    assert admin._replica_text(r(True, "DOWN")) == "h:1 (DOWN)"
    assert admin._replica_text(r(False, "LIVE", "NON_VOTER")) == "h:1 (NON_VOTER)"
