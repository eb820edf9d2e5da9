"""AlterSchema's target version and column ids (AlterSchemaRequest.new_version,
next_column_id): the coordinator brings a replica that missed alters to its table's schema in
one step (coordinator/replication.py `alter_stale`), and the replica's next heartbeat report
says its new version (the manager names the report changed: no Raft event does)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from rpc.errors import BadRequest, CasFailed
from rpc.protocols.tserver_pb2 import ColumnSchemaPB, DataType, OpType, SchemaPB
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tservers.tablet import schema as schemamod


def create_schema() -> SchemaPB:
    return SchemaPB(
        columns=[
            ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
            ColumnSchemaPB(name="v", type=DataType.STRING, nullable=True),
        ]
    )


def col(name: str, cid: int = 0) -> ColumnSchemaPB:
    return ColumnSchemaPB(id=cid, name=name, type=DataType.STRING, nullable=True)


def test_a_replica_skips_two_versions_keeping_the_ids_given(tmp_path):
    m = open_manager(tmp_path / "root")
    t = create(m)  # version 1, columns id n x s b ts numbered 0..5, next 6
    t.write(1, [(OpType.INSERT, ipc(six_rows(range(3))))], deadline())
    m.driver.take_report_changes()
    # v2 added "p" (id 6), v3 dropped it, added "q" (id 7) and dropped "s": this replica
    # missed both and takes v3 at once; "p" never existed here, yet ids stay in step.
    new = m.alter_schema("t1", 1, [col("q", 7)], ["s"], deadline(), new_version=3,
                         next_column_id=8)  # fmt: skip
    assert new.version == 3 and new.next_column_id == 8
    assert [(c.name, c.id) for c in new.columns][-2:] == [("ts", 5), ("q", 7)]
    assert "s" not in {c.name for c in new.columns}
    assert "t1" in m.driver.take_report_changes()  # reported at the next heartbeat
    assert {r.tablet_id: r.schema_version for r in m.reports()}["t1"] == 3
    t.write(3, [(OpType.UPSERT, ipc(pa.table({"id": pa.array([1], pa.int64()), "q": ["e"]})))],
            deadline())  # fmt: skip
    r = t.scan([], [], [], [], 0)
    assert r.column_names[-1] == "q" and r["q"].to_pylist() == [None, "e", None]
    # A later alter numbered by the replica itself goes on from the id given.
    later = m.alter_schema("t1", 3, [col("r")], [], deadline(), new_version=4)
    assert [(c.name, c.id) for c in later.columns][-1] == ("r", 8)
    m.close()
    m = open_manager(tmp_path / "root")  # the superblock holds it
    assert m.tablet("t1").sb.schema == later
    m.close()


def test_new_version_must_be_above_the_replicas(tmp_path):
    m = open_manager(tmp_path / "root")
    create(m)
    m.alter_schema("t1", 1, [col("p")], [], deadline(), new_version=3)
    for version in (2, 3):
        with pytest.raises(BadRequest, match="not above"):
            m.alter_schema("t1", 3, [col("q")], [], deadline(), new_version=version)
    with pytest.raises(CasFailed):  # the CAS first: a repeat of an applied alter
        m.alter_schema("t1", 1, [col("p")], [], deadline(), new_version=3)
    assert m.tablet("t1").sb.schema.version == 3
    m.close()


def test_ids_given_must_be_unused():
    current = schemamod.validate_new(create_schema())
    assert current.next_column_id == 2
    with pytest.raises(BadRequest, match="id 1 used"):
        schemamod.altered(current, [col("p", 1)], [], 2, 3)
    with pytest.raises(BadRequest, match="id 3 used"):  # not below the next id given
        schemamod.altered(current, [col("p", 3)], [], 2, 3)
    with pytest.raises(BadRequest, match="id 2 used"):
        schemamod.altered(current, [col("p", 2), col("q", 2)], [], 2, 4)
    with pytest.raises(BadRequest, match="below the replica's"):
        schemamod.altered(current, [], [], 2, 1)
    with pytest.raises(BadRequest, match="without new_version"):
        schemamod.altered(current, [col("p", 2)], [], 0, 3)
    # Only the version (a column added and dropped in the versions it missed).
    same = schemamod.altered(current, [], [], 4, 3)
    assert (same.version, same.next_column_id, list(same.columns)) == (
        4,
        3,
        list(current.columns),
    )
    # Without new_version nothing changes from before.
    legacy = schemamod.altered(current, [col("p", 9)], [])
    assert (legacy.version, legacy.columns[-1].id, legacy.next_column_id) == (2, 2, 3)


def test_nothing_to_alter_is_refused_without_new_version(tmp_path):
    m = open_manager(tmp_path / "root")
    create(m)
    with pytest.raises(BadRequest, match="nothing to alter"):
        m.alter_schema("t1", 1, [], [], deadline())
    assert m.alter_schema("t1", 1, [], [], deadline(), new_version=2).version == 2
    m.close()
