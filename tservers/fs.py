"""The on-disk layout of one tablet server (architecture 5.1) and its metadata files.

instance                        uuid, format time (written once by `tserver fs format`)
tablet-meta/<tablet_id>         superblock
consensus-meta/<tablet_id>      consensus metadata
wals/<tablet_id>/wal-000000001  WAL segments
data/<tablet_id>/block-<n>.arrow immutable data blocks
quarantine/<tablet_id>.<n>/     what a deletion moved aside (mtime: the time of the deletion),
                                removed after a retention period (tservers/quarantine.py)
lock                            flock held by the process that owns the root (pid inside)

A running tablet server holds an exclusive flock on `lock` (`lock_root`); tools that change
a stopped server's files (`tserver copy-from-remote`) take the same lock and so refuse to run
beside the server. The kernel drops the lock when its holder dies, kill -9 included.
"""

from __future__ import annotations

import os
import time
import uuid as uuidlib
from pathlib import Path

from rpc.dirlock import DirLock, DirLocked, DirLockError, lock_dir
from rpc.protocols.tserver_pb2 import ConsensusMetaPB, InstancePB, SuperblockPB
from tservers import metafile
from tservers.metafile import MetaFileCorrupt

SUBDIRS = ("tablet-meta", "consensus-meta", "wals", "data", "quarantine")


class FsError(Exception):
    """An operating error with the server's file system root (unformatted, corrupt, ...)."""


class FsLocked(FsError):
    """Another process holds the root's lock (a running tablet server, or a tool)."""


FsLock = DirLock


def lock_root(root: Path, holder: str = "tserver") -> DirLock:
    """Take the fs root's exclusive lock without waiting (`rpc.dirlock`); FsLocked names
    the holder. Taking it again in the process that holds it succeeds (and releasing that
    second handle keeps the first)."""
    root = Path(root)
    FsLayout.read_instance(root)  # a formatted root only (FsError otherwise)
    try:
        return lock_dir(root, holder)
    except DirLocked as e:
        raise FsLocked(f"{e}: stop the tablet server first") from None
    except DirLockError as e:
        raise FsError(str(e)) from None


class FsLayout:
    """Paths and metadata I/O under one fs root. Holds no state besides the root and uuid."""

    def __init__(self, root: Path, uuid: str) -> None:
        self.root = root
        self.uuid = uuid

    # ------------------------------------------------------------ format / open
    @staticmethod
    def format(root: Path, uuid: str | None = None) -> FsLayout:
        root = Path(root)
        if root.exists():
            if not root.is_dir():
                raise FsError(f"{root} exists and is not a directory")
            if any(root.iterdir()):
                raise FsError(f"refusing to format {root}: directory is not empty")
        root.mkdir(parents=True, exist_ok=True)
        for sub in SUBDIRS:
            (root / sub).mkdir()
        metafile.fsync_dir(root)
        inst = InstancePB(uuid=uuid or uuidlib.uuid4().hex, format_time_ms=int(time.time() * 1000))
        metafile.write_meta(root / "instance", metafile.MAGIC_INSTANCE, inst)
        return FsLayout(root, inst.uuid)

    @staticmethod
    def read_instance(root: Path) -> InstancePB:
        path = Path(root) / "instance"
        if not Path(root).is_dir():
            what = "is not a directory" if Path(root).exists() else "does not exist"
            raise FsError(f"{root} {what}, so it is not formatted; check the path, or run "
                          "`tserver fs format`")  # fmt: skip
        if not path.exists():
            raise FsError(f"{root} is not formatted (no instance file); run `tserver fs format`")
        try:
            return metafile.read_meta(path, metafile.MAGIC_INSTANCE, InstancePB)
        except MetaFileCorrupt as e:
            raise FsError(f"corrupt instance file: {e}") from e

    @staticmethod
    def open(root: Path) -> FsLayout:
        root = Path(root)
        inst = FsLayout.read_instance(root)
        for sub in SUBDIRS:
            (root / sub).mkdir(exist_ok=True)
        return FsLayout(root, inst.uuid)

    # ------------------------------------------------------------ paths
    def superblock_path(self, tablet_id: str) -> Path:
        return self.root / "tablet-meta" / tablet_id

    def cmeta_path(self, tablet_id: str) -> Path:
        return self.root / "consensus-meta" / tablet_id

    def wal_dir(self, tablet_id: str) -> Path:
        return self.root / "wals" / tablet_id

    def data_dir(self, tablet_id: str) -> Path:
        return self.root / "data" / tablet_id

    @property
    def quarantine_root(self) -> Path:
        return self.root / "quarantine"

    def tablet_ids(self) -> list[str]:
        return sorted(
            p.name for p in (self.root / "tablet-meta").iterdir() if not p.name.endswith(".tmp")
        )

    def new_quarantine_dir(self, tablet_id: str) -> Path:
        """Create quarantine/<tablet_id>.<n> with the first unused n (fsynced)."""
        base = self.quarantine_root
        n = 1
        while True:
            path = base / f"{tablet_id}.{n}"
            try:
                path.mkdir()
            except FileExistsError:
                n += 1
                continue
            metafile.fsync_dir(base)
            return path

    # ------------------------------------------------------------ metadata files
    def read_superblock(self, tablet_id: str) -> SuperblockPB:
        return metafile.read_meta(
            self.superblock_path(tablet_id), metafile.MAGIC_SUPERBLOCK, SuperblockPB
        )

    def write_superblock(self, sb: SuperblockPB) -> None:
        assert sb.tablet_id
        metafile.write_meta(self.superblock_path(sb.tablet_id), metafile.MAGIC_SUPERBLOCK, sb)

    def read_cmeta(self, tablet_id: str) -> ConsensusMetaPB:
        return metafile.read_meta(self.cmeta_path(tablet_id), metafile.MAGIC_CMETA, ConsensusMetaPB)

    def write_cmeta(self, cm: ConsensusMetaPB) -> None:
        assert cm.tablet_id
        metafile.write_meta(self.cmeta_path(cm.tablet_id), metafile.MAGIC_CMETA, cm)


def move_dir(src: Path, dst: Path) -> None:
    """Atomic rename of a directory, with both parents fsynced."""
    os.rename(src, dst)
    metafile.fsync_dir(dst.parent)
    if src.parent != dst.parent:
        metafile.fsync_dir(src.parent)
