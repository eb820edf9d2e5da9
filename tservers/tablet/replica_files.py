"""A replica's data states and the on-disk steps of its lifecycle (seed 000).

The data states (`TabletDataState`), the check of a tablet id, and the file steps that both
the tablet manager (a running server) and tablet copy (running or offline) take: deleting a
replica into quarantine with a tombstone, rolling a deletion forward at start-up, and the
superblock of a copied replica made READY. Kept apart from the manager so that tablet copy
uses them without importing the manager (which owns the copy jobs).
"""

from __future__ import annotations

import enum
import os
import re
from pathlib import Path

from rpc.errors import BadRequest
from rpc.protocols.tserver_pb2 import DataState, OpIdPB, SuperblockPB
from tservers.crash import crash_point
from tservers.fs import FsLayout, move_dir
from tservers.metafile import write_atomic
from tservers.quarantine import REMOVING_SUFFIX

TABLET_ID_RE = re.compile(r"^[A-Za-z0-9_\-]{1,64}$")


class TabletDataState(enum.Enum):
    """Seed 000's data states; DOES_NOT_EXIST is the absence of a superblock."""

    DOES_NOT_EXIST = 0
    READY = DataState.READY
    COPYING = DataState.COPYING
    DELETED = DataState.DELETED


def check_tablet_id(tablet_id: str) -> None:
    if not TABLET_ID_RE.match(tablet_id or ""):
        raise BadRequest(f"bad tablet id {tablet_id!r} (1-64 of A-Z a-z 0-9 _ -)")


def quarantine_dirs(fs: FsLayout, tablet_id: str) -> list[Path]:
    """A tablet's quarantine directories, by n (those being removed left out)."""
    return sorted(
        (
            p
            for p in fs.quarantine_root.glob(f"{tablet_id}.*")
            if not p.name.endswith(REMOVING_SUFFIX)
        ),
        key=lambda p: int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0,
    )


def tombstone_files(fs: FsLayout, sb: SuperblockPB, last: OpIdPB) -> SuperblockPB:
    """Deletion steps 2-6 of a replica that is shut down (or of a stopped server: `tserver
    copy-from-remote --force`): quarantine, tombstone with `last`, move the data aside."""
    tablet_id = sb.tablet_id
    # Step 2: the quarantine directory.
    qdir = fs.new_quarantine_dir(tablet_id)
    crash_point("delete.after_step_2")
    # Step 3: a copy of the current superblock.
    data = fs.superblock_path(tablet_id).read_bytes()
    write_atomic(qdir / "superblock", data)
    crash_point("delete.after_step_3")
    # Step 4: the tombstone; from here on the deletion is rolled forward.
    new = SuperblockPB()
    new.CopyFrom(sb)
    new.data_state = DataState.DELETED
    new.last_op_id.CopyFrom(last)
    new.quarantine_path = str(qdir.relative_to(fs.root))
    del new.blocks[:]
    new.flushed_index = 0
    fs.write_superblock(new)
    crash_point("delete.after_step_4")
    roll_forward_deletion(fs, new)
    return new


def roll_forward_deletion(fs: FsLayout, sb: SuperblockPB) -> None:
    """Steps 5 and 6; idempotent, so startup can redo them."""
    tablet_id = sb.tablet_id
    assert sb.data_state == DataState.DELETED and sb.quarantine_path
    qdir = fs.root / sb.quarantine_path
    qdir.mkdir(parents=True, exist_ok=True)
    # Step 5: a copy of the consensus metadata (the original stays: it is kept forever).
    cm = fs.cmeta_path(tablet_id)
    if cm.exists():
        write_atomic(qdir / "consensus-meta", cm.read_bytes())
    crash_point("delete.after_step_5")
    # Step 6: move the data and then the WAL directory aside.
    data_dir = fs.data_dir(tablet_id)
    if data_dir.exists():
        move_dir(data_dir, qdir / "data")
    crash_point("delete.after_move_data")
    wal_dir = fs.wal_dir(tablet_id)
    if wal_dir.exists():
        move_dir(wal_dir, qdir / "wal")
    # The directory's mtime is the time of the deletion: the quarantine's retention counts
    # from it (tservers/quarantine.py). The renames above set it too; this says so.
    os.utime(qdir)
    crash_point("delete.after_step_6")


def ready_superblock(tablet_id: str, remote_sb: SuperblockPB) -> SuperblockPB:
    """Copy step 5's superblock: the source's, READY here, no quarantine, no tombstone op id."""
    sb = SuperblockPB()
    sb.CopyFrom(remote_sb)
    sb.tablet_id = tablet_id
    sb.data_state = DataState.READY
    sb.quarantine_path = ""
    sb.ClearField("last_op_id")
    return sb
