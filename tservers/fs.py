"""The on-disk layout of one tablet server (architecture 5.1) and its metadata files.

instance                        uuid, format time (written by `tserver fs format`; metafile
                                version 2 once the hard-state journal is in use)
tablet-meta/<tablet_id>         superblock
consensus-meta/<tablet_id>      consensus metadata
consensus-meta/hardstate.journal terms and votes newer than those files (tservers/hardstate.py)
wals/<tablet_id>/wal-000000001  WAL segments
data/<tablet_id>/block-<n>.arrow immutable data blocks
quarantine/<tablet_id>.<n>/     what a deletion moved aside (mtime: the time of the deletion),
                                removed after a retention period (tservers/quarantine.py)
lock                            flock held by the process that owns the root (pid inside)
keys/tserver.key{,_secret}      the server's CURVE key pair (design/security.md section 2):
                                made by `fs format` (an older root gets it at its first
                                start), the secret 0600 in a 0700 directory, never replaced
principals                      the principals table the coordinator leader last pushed
                                (0600, CRC-checked; tservers/principals.py), read at start

A running tablet server holds an exclusive flock on `lock` (`lock_root`); tools that change
a stopped server's files (`tserver copy-from-remote`) take the same lock and so refuse to run
beside the server. The kernel drops the lock when its holder dies, kill -9 included.
"""

from __future__ import annotations

import math
import os
import threading
import time
import uuid as uuidlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rpc import keys
from rpc.dirlock import DirLock, DirLocked, DirLockError, lock_dir
from rpc.errors import NoSpace
from rpc.protocols.tserver_pb2 import ConsensusMetaPB, InstancePB, SuperblockPB
from tservers import hardstate, metafile
from tservers.metafile import MetaFileCorrupt

SUBDIRS = ("tablet-meta", "consensus-meta", "wals", "data", "quarantine")
# The instance file's metafile version: 2 once the hard-state journal is in use
# (tservers/hardstate.py), which older code refuses ("unsupported version 2").
INSTANCE_VERSION_FILES = 1
INSTANCE_VERSION_JOURNAL = 2
INSTANCE_VERSIONS = (INSTANCE_VERSION_FILES, INSTANCE_VERSION_JOURNAL)
KEYS_DIR = "keys"  # made by rpc.keys.create_keypair (mode 0700), not with SUBDIRS
KEY_NAME = "tserver"


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
        # Plain strings for the per-tablet reads of a start-up (10,000 of each, issue 28):
        # a pathlib.Path built and formatted per file costs more than the read itself.
        self._sb_dir = os.path.join(root, "tablet-meta")
        self._cmeta_dir = os.path.join(root, "consensus-meta")
        self._wals = Path(root) / "wals"  # one Path join per tablet directory, not two
        self._data = Path(root) / "data"
        # Told of the files it writes (a tablet id; None: the quarantine): the server's
        # DiskSpace re-counts those at its next refresh (`DiskSpace.files_changed`).
        self.changed: Callable[[str | None], None] | None = None
        # Terms and votes newer than the consensus metadata files (`read_cmeta` merges);
        # appended to once `use_journal` opened it.
        try:
            self.hard_states = hardstate.HardStateJournal(Path(self._cmeta_dir) / hardstate.NAME)
        except hardstate.JournalCorrupt as e:
            raise FsError(str(e)) from e

    # ------------------------------------------------------------ format / open
    @staticmethod
    def format(root: Path, uuid: str | None = None) -> FsLayout:
        root = Path(root)
        if root.exists():
            if not root.is_dir():
                raise FsError(f"{root} exists and is not a directory")
            if any(root.iterdir()):
                raise FsError(f"refusing to format {root}: directory is not empty")
        missing = [d for d in (root, *root.parents) if not d.exists()]
        root.mkdir(parents=True, exist_ok=True)
        for made in reversed(missing):  # each new directory's entry durable in its parent
            metafile.fsync_dir(made.parent)
        for sub in SUBDIRS:
            (root / sub).mkdir()
        metafile.fsync_dir(root)
        inst = InstancePB(uuid=uuid or uuidlib.uuid4().hex, format_time_ms=int(time.time() * 1000))
        metafile.write_meta(root / "instance", metafile.MAGIC_INSTANCE, inst)
        fs = FsLayout(root, inst.uuid)
        keys.create_keypair(fs.keys_dir, KEY_NAME)
        return fs

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
            return metafile.read_meta(path, metafile.MAGIC_INSTANCE, InstancePB, INSTANCE_VERSIONS)
        except MetaFileCorrupt as e:
            raise FsError(f"corrupt instance file: {e}") from e

    @staticmethod
    def instance_version(root: Path) -> int:
        return metafile.header_version(metafile.read_file(Path(root) / "instance", 64))

    # ------------------------------------------------------------ the hard-state journal
    def use_journal(self) -> None:
        """Terms and votes go to the hard-state journal from here on (`write_hard_states`).
        The instance file is marked first (version 2: older code refuses the root)."""
        if self.hard_states.is_open:
            return
        path = self.root / "instance"
        if self.instance_version(self.root) != INSTANCE_VERSION_JOURNAL:
            inst = self.read_instance(self.root)
            metafile.write_meta(
                path, metafile.MAGIC_INSTANCE, inst, version=INSTANCE_VERSION_JOURNAL
            )
        self.hard_states.open_for_append()

    def close_journal(self) -> None:
        self.hard_states.close()

    def downgrade(self) -> list[str]:
        """Fold the journal into the consensus metadata files, remove it and write the
        instance file as older code reads it (version 1). Returns the tablets whose file
        was written. The root's lock must be held (no server running)."""
        written = []
        for tablet_id, state in sorted(self.hard_states.states.items()):
            try:
                cm = metafile.read_meta(
                    os.path.join(self._cmeta_dir, tablet_id), metafile.MAGIC_CMETA, ConsensusMetaPB
                )
            except FileNotFoundError:
                continue  # (a record of a tablet whose files are gone)
            if hardstate.newer(state, (cm.current_term, cm.voted_for)):
                self.write_cmeta(hardstate.merge(cm, state))
                written.append(tablet_id)
        self.hard_states.close()
        self.hard_states.path.unlink(missing_ok=True)
        metafile.fsync_dir(self.hard_states.path.parent)
        self.hard_states = hardstate.HardStateJournal(self.hard_states.path)
        inst = self.read_instance(self.root)
        metafile.write_meta(
            self.root / "instance", metafile.MAGIC_INSTANCE, inst, version=INSTANCE_VERSION_FILES
        )
        return written

    @staticmethod
    def open(root: Path) -> FsLayout:
        root = Path(root)
        inst = FsLayout.read_instance(root)
        for sub in SUBDIRS:
            (root / sub).mkdir(exist_ok=True)
        return FsLayout(root, inst.uuid)

    # ------------------------------------------------------------ keys
    @property
    def keys_dir(self) -> Path:
        return self.root / KEYS_DIR

    def has_keys(self) -> bool:
        return keys.secret_path(self.keys_dir, KEY_NAME).exists()

    def load_keys(self) -> tuple[keys.KeyPair, bool]:
        """The server's CURVE key pair and whether it was made just now (a root formatted
        before keys existed gets one at its first start). Raises FsError for a key file
        that is unreadable, mismatched or readable by others (rpc.keys.load_keypair)."""
        created = not self.has_keys() and not keys.public_path(self.keys_dir, KEY_NAME).exists()
        try:
            return keys.load_or_create_keypair(self.keys_dir, KEY_NAME), created
        except keys.KeyFileError as e:
            raise FsError(str(e)) from e

    def public_key(self) -> str:
        """The server's public key (z85) from keys/tserver.key (FsError when missing)."""
        path = keys.public_path(self.keys_dir, KEY_NAME)
        if not path.exists():
            raise FsError(
                f"{self.root} has no key pair yet ({path}): `tserver start` makes it for a "
                "root formatted before keys existed"
            )
        try:
            return keys.load_public_key(path)
        except keys.KeyFileError as e:
            raise FsError(str(e)) from e

    # ------------------------------------------------------------ paths
    def superblock_path(self, tablet_id: str) -> Path:
        return self.root / "tablet-meta" / tablet_id

    def cmeta_path(self, tablet_id: str) -> Path:
        return self.root / "consensus-meta" / tablet_id

    def wal_dir(self, tablet_id: str) -> Path:
        return self._wals / tablet_id

    def data_dir(self, tablet_id: str) -> Path:
        return self._data / tablet_id

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
            if self.changed is not None:
                self.changed(None)
            return path

    # ------------------------------------------------------------ metadata files
    def read_superblock(self, tablet_id: str) -> SuperblockPB:
        return metafile.read_meta(
            os.path.join(self._sb_dir, tablet_id), metafile.MAGIC_SUPERBLOCK, SuperblockPB
        )

    def write_superblock(self, sb: SuperblockPB) -> None:
        assert sb.tablet_id
        metafile.write_meta(self.superblock_path(sb.tablet_id), metafile.MAGIC_SUPERBLOCK, sb)
        if self.changed is not None:
            self.changed(sb.tablet_id)

    def read_cmeta(self, tablet_id: str) -> ConsensusMetaPB:
        """The tablet's consensus metadata: its file, with the journal's term and vote
        when those are newer (`hardstate.merge`)."""
        cm = metafile.read_meta(
            os.path.join(self._cmeta_dir, tablet_id), metafile.MAGIC_CMETA, ConsensusMetaPB
        )
        return hardstate.merge(cm, self.hard_states.get(tablet_id))

    def write_cmeta(self, cm: ConsensusMetaPB) -> None:
        assert cm.tablet_id
        metafile.write_meta(self.cmeta_path(cm.tablet_id), metafile.MAGIC_CMETA, cm)
        if self.changed is not None:
            self.changed(cm.tablet_id)

    def write_cmetas(self, cms: list[ConsensusMetaPB]) -> None:
        """Several tablets' consensus metadata made durable together (metafile.write_meta_many)."""
        assert all(cm.tablet_id for cm in cms)
        metafile.write_meta_many(
            [(self.cmeta_path(cm.tablet_id), metafile.MAGIC_CMETA, cm) for cm in cms]
        )
        if self.changed is not None:
            for cm in cms:
                self.changed(cm.tablet_id)

    def write_hard_states(self, cms: list[ConsensusMetaPB]) -> None:
        """New terms and votes (the rest of each `cm` as its file has it) made durable: one
        record of the hard-state journal and one fdatasync when it is in use
        (`use_journal`), else the files (`write_cmetas`)."""
        if not self.hard_states.is_open:
            if len(cms) == 1:
                self.write_cmeta(cms[0])
            else:
                self.write_cmetas(cms)
            return
        self.hard_states.append([(cm.tablet_id, cm.current_term, cm.voted_for) for cm in cms])
        if self.changed is not None:
            self.changed(hardstate.NAME)  # (counted as consensus-meta/'s entry of that name)

    def rewrite_cmeta(self, cm: ConsensusMetaPB) -> None:
        """Write the file as given, even with a lower term or no vote (an operator's
        `tserver cmeta rewrite`): the journal forgets the tablet after the file is written."""
        self.write_cmeta(cm)
        if self.hard_states.get(cm.tablet_id) is not None:
            if not self.hard_states.is_open:
                self.use_journal()
            self.hard_states.forget([cm.tablet_id])


def move_dir(src: Path, dst: Path) -> None:
    """Atomic rename of a directory, with both parents fsynced."""
    os.rename(src, dst)
    metafile.fsync_dir(dst.parent)
    if src.parent != dst.parent:
        metafile.fsync_dir(src.parent)


# ---------------------------------------------------------------- disk as a resource
# Kudu's fs_data_dirs_reserved_bytes: free space a tablet server keeps on its root's file
# system. At or below it, new tablets (CreateTablet), tablet copies onto the server and
# writes are refused with NO_SPACE; reads, deletes, flushes and compactions go on (they
# free space or need the headroom the reserve keeps). Default: 1% of the file system or
# 1 GiB, whichever is smaller.
RESERVED_FRACTION_DEFAULT = 0.01
RESERVED_BYTES_CAP_DEFAULT = 1 << 30
RESERVED_BYTES_MAX = (1 << 63) - 1  # the heartbeat's DiskReport has uint64 fields
# statvfs is cheap, but a write path asks on every call: the answer is reused this long,
# less the bytes the callers admitted since said they would write (`DiskSpace.require`: a
# client writing 0.5 MB batches every 6 ms went 8 MB past a stale answer and a flush then
# filled the disk, in tests/tservers/test_disk_reserve.py).
DISK_CHECK_INTERVAL_S = 0.1
# Bytes under the root (its own files) are counted again at most this often, and then only
# what may have changed (`RootBytes`): the tablets whose files the server wrote since (told by
# `DiskSpace.files_changed`), the tablet directories created or removed (the mtimes of wals/,
# data/, tablet-meta/, consensus-meta/), the files outside tablet directories (quarantine,
# keys) when the root's or the quarantine's mtime changed or the quarantine was written; and
# a slice of every tablet, so that each is counted again every ROOT_BYTES_FULL_S whatever
# it was told (a writer that tells nothing is seen that late, not never). Issue 28: a walk of
# every file every 10 s was most of an idle server's CPU at 3,000 replicas.
ROOT_BYTES_INTERVAL_S = 10.0
ROOT_BYTES_FULL_S = 600.0
# ... or longer: the next refresh waits at least this many times the CPU time the last one
# took (the first, which counts every file, at most 1% of a core).
ROOT_BYTES_WALK_SHARE = 100
# The directories that hold one entry per tablet (named by its id).
TABLET_SUBDIRS = ("wals", "data", "tablet-meta", "consensus-meta")


def default_reserved_bytes(total_bytes: int) -> int:
    return min(int(total_bytes * RESERVED_FRACTION_DEFAULT), RESERVED_BYTES_CAP_DEFAULT)


def tree_bytes(root: Path) -> int:
    """Bytes allocated under `root` (st_blocks), files vanishing meanwhile skipped."""
    return _tree(str(root))[0]


def _tree(root: str) -> tuple[int, int]:
    """(bytes allocated under `root`, entries stat'ed); a file: its own bytes."""
    total = 0
    stats = 0
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.is_dir(follow_symlinks=False):
                            stack.append(e.path)
                        else:
                            stats += 1
                            total += e.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except NotADirectoryError:
            try:
                stats += 1
                total += os.lstat(d).st_blocks * 512
            except OSError:
                pass
        except OSError:
            continue
    return total, stats


def _mtime_ns(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


class RootBytes:
    """Bytes allocated under a server's root, kept per tablet entry (wals/<id>, data/<id>,
    tablet-meta/<id>, consensus-meta/<id>) plus the rest (quarantine, keys, top-level files),
    and counted again only where something may have changed (see ROOT_BYTES_INTERVAL_S).
    An entry or the rest that changed at a refresh is counted again at the next one too (a
    tablet copy or a flush may still be writing it), and a directory listed because its
    mtime changed is listed again at the next (a change within the same clock tick)."""

    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self._lock = threading.Lock()
        self._dirty: set[str] = set()  # tablet ids told since the last refresh
        self._rest_dirty = True
        self._entries: dict[tuple[str, str], int] = {}  # (subdir, name) -> bytes
        self._listed: dict[str, set[str]] = {}  # subdir -> names at its last listing
        self._mtimes: dict[str, int | None] = {}  # subdir or "" (root), "quarantine"
        self._relist: set[str] = set()
        self._again: set[tuple[str, str]] = set()
        self._rest = 0
        self._rest_again = False
        self._total = 0
        self._roll: list[tuple[str, str]] = []  # the slice still to count this full period
        self._rest_at = float("-inf")
        self.refreshes = 0
        self.stats = 0  # files stat'ed, all refreshes (tests: O(changed), not O(files))

    def changed(self, tablet_id: str | None) -> None:
        """Files of `tablet_id` (None: outside the tablet directories) were written or removed."""
        with self._lock:
            if tablet_id is None:
                self._rest_dirty = True
            else:
                self._dirty.add(tablet_id)

    def changed_many(self, tablet_ids: Iterable[str]) -> None:
        with self._lock:
            self._dirty.update(tablet_ids)

    @property
    def total(self) -> int:
        return self._total

    def refresh(self, now: float, interval_s: float) -> int:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
            rest_dirty, self._rest_dirty = self._rest_dirty, False
        keys, self._again = self._again, set()
        for sub in TABLET_SUBDIRS:
            path = os.path.join(self.root, sub)
            m = _mtime_ns(path)
            if m == self._mtimes.get(sub, -1) and sub not in self._relist:
                continue
            self._relist.discard(sub)
            if m != self._mtimes.get(sub, -1):
                self._relist.add(sub)  # again next time: a change in the same clock tick
            self._mtimes[sub] = m
            try:
                names = set(os.listdir(path))
            except OSError:
                names = set()
            old = self._listed.get(sub, set())
            keys.update((sub, n) for n in names - old)
            for n in old - names:
                self._total -= self._entries.pop((sub, n), 0)
            self._listed[sub] = names
        for t in dirty:
            for sub in TABLET_SUBDIRS:
                if t in self._listed.get(sub, ()):
                    keys.add((sub, t))
        # The slice of every entry this refresh counts again, so that each is counted again
        # every ROOT_BYTES_FULL_S (more often when there are few refreshes).
        if not self._roll:
            self._roll = list(self._entries)
        n = math.ceil(len(self._entries) * interval_s / max(interval_s, ROOT_BYTES_FULL_S, 1e-9))
        if n:
            keys.update(self._roll[-n:])
            del self._roll[-n:]
        for key in keys:
            sub, name = key
            if name not in self._listed.get(sub, ()):
                continue
            size, stats = _tree(os.path.join(self.root, sub, name))
            self.stats += stats
            old = self._entries.get(key)
            if old != size:
                self._entries[key] = size
                self._total += size - (old or 0)
                if old is not None or self.refreshes:  # (the first refresh counts all)
                    self._again.add(key)
        # The rest: the root's files and its other directories (quarantine, keys).
        rest_due = rest_dirty or self._rest_again or now - self._rest_at >= ROOT_BYTES_FULL_S
        for d in ("", "quarantine"):
            m = _mtime_ns(os.path.join(self.root, d))
            if m != self._mtimes.get(d, -1):
                self._mtimes[d] = m
                rest_due = True
        if rest_due:
            self._rest_at = now
            rest = 0
            try:
                with os.scandir(self.root) as it:
                    others = [e.path for e in it if e.name not in TABLET_SUBDIRS]
            except OSError:
                others = []
            for p in others:
                size, stats = _tree(p)
                self.stats += stats
                rest += size
            self._rest_again = rest != self._rest or rest_dirty
            self._total += rest - self._rest
            self._rest = rest
        self.refreshes += 1
        return self._total


@dataclass(frozen=True, slots=True)
class DiskState:
    total_bytes: int
    free_bytes: int  # available to an unprivileged writer (f_bavail)
    reserved_bytes: int

    @property
    def used_bytes(self) -> int:
        return max(0, self.total_bytes - self.free_bytes)

    @property
    def full(self) -> bool:
        return self.free_bytes <= self.reserved_bytes


class DiskSpace:
    """The free space of a server's root file system against its reserve.

    `reserved_bytes` None: the default (`default_reserved_bytes`); 0: no reserve (only a
    file system with no byte left is full). `require(what)` raises NoSpace when full."""

    def __init__(self, root: Path, server_uuid: str, reserved_bytes: int | None = None) -> None:
        if reserved_bytes is not None and not 0 <= reserved_bytes <= RESERVED_BYTES_MAX:
            raise ValueError(
                f"reserved bytes must be from 0 to {RESERVED_BYTES_MAX}, got {reserved_bytes}"
            )
        self.root = Path(root)
        self.server_uuid = server_uuid
        self._reserved = reserved_bytes
        self._lock = threading.Lock()
        self._state: DiskState | None = None
        self._at = 0.0
        self._admitted = 0  # bytes `require` admitted since the statvfs of _state
        self._root = RootBytes(self.root)
        self._root_lock = threading.Lock()
        self._root_next_at = float("-inf")
        self.refusals = 0  # calls refused with NO_SPACE (metrics)

    def set_reserved_bytes(self, reserved_bytes: int | None) -> None:
        """Change the reserve (None: the default); the next check reads the file system."""
        if reserved_bytes is not None and not 0 <= reserved_bytes <= RESERVED_BYTES_MAX:
            raise ValueError(
                f"reserved bytes must be from 0 to {RESERVED_BYTES_MAX}, got {reserved_bytes}"
            )
        with self._lock:
            self._reserved = reserved_bytes
            self._state = None
            self._admitted = 0

    def state(self, *, fresh: bool = False) -> DiskState:
        now = time.monotonic()
        with self._lock:
            if not fresh and self._state is not None and now - self._at < DISK_CHECK_INTERVAL_S:
                return self._state
        st = os.statvfs(self.root)
        total = st.f_blocks * st.f_frsize
        free = st.f_bavail * st.f_frsize
        reserved = self._reserved if self._reserved is not None else default_reserved_bytes(total)
        state = DiskState(total, free, reserved)
        with self._lock:
            self._state, self._at, self._admitted = state, now, 0
        return state

    def _admit(self, need_bytes: int, fresh: bool) -> tuple[DiskState, bool]:
        """(the state, less the bytes admitted since its statvfs; whether `need_bytes` is
        refused), admitting (counting) them when not."""
        st = self.state(fresh=fresh)
        with self._lock:
            st = self._state or st  # the newest (another thread's statvfs meanwhile)
            free = max(0, st.free_bytes - self._admitted)
            st = DiskState(st.total_bytes, free, st.reserved_bytes)
            refused = st.full or st.free_bytes - need_bytes < st.reserved_bytes
            if not refused:
                self._admitted += need_bytes
        return st, refused

    def files_changed(self, tablet_id: str | None) -> None:
        """The server wrote or removed files of `tablet_id` (None: outside the tablets'
        directories, e.g. the quarantine): counted again at the next refresh of root_bytes."""
        self._root.changed(tablet_id)

    def tablets_changed(self, tablet_ids: Iterable[str]) -> None:
        self._root.changed_many(tablet_ids)

    @property
    def root_files_stated(self) -> int:
        """Files stat'ed by every refresh of root_bytes so far (tests, metrics)."""
        return self._root.stats

    def root_bytes(self) -> int:
        """Bytes under the root, refreshed (what may have changed: `RootBytes`) when the
        last refresh is older than ROOT_BYTES_INTERVAL_S, or than ROOT_BYTES_WALK_SHARE
        times the CPU time it took (the caller's thread, the heartbeat's, pays for it)."""
        now = time.monotonic()
        if now < self._root_next_at:
            return self._root.total
        with self._root_lock:
            if now < self._root_next_at:
                return self._root.total
            cpu = time.thread_time()
            total = self._root.refresh(now, ROOT_BYTES_INTERVAL_S)
            took = time.thread_time() - cpu
            self._root_next_at = now + max(ROOT_BYTES_INTERVAL_S, ROOT_BYTES_WALK_SHARE * took)
        return total

    def root_bytes_counted(self) -> int:
        """The bytes under the root as last counted (0 before the first count)."""
        return self._root.total

    def require(self, what: str, need_bytes: int = 0) -> None:
        """Raise NoSpace naming the server, the free bytes and the reserve when full, or
        when `need_bytes` (what the caller is about to write: a write's rows, a tablet
        copy's announced size) would take the free space below the reserve. Admitted bytes
        are taken off the cached free space until the next statvfs."""
        st, refused = self._admit(need_bytes, fresh=False)
        if not refused:
            return
        st, refused = self._admit(need_bytes, fresh=True)  # freed since, or written
        if not refused:
            return
        with self._lock:
            self.refusals += 1
        where = f"{st.free_bytes} bytes free on the file system of {self.root}"
        if st.full:
            why = f"{where}, at or below its reserve of {st.reserved_bytes} bytes "
        else:
            why = (
                f"it needs {need_bytes} bytes, {where}: that would leave less than its "
                f"reserve of {st.reserved_bytes} bytes "
            )
        raise NoSpace(
            f"tablet server {self.server_uuid}: {what} refused: {why}"
            "(--fs-reserved-bytes); reads, deletes and compactions go on: free space (drop "
            "tables: at or below the reserve, the quarantine/ of dropped replicas is reaped "
            "oldest first) or add tablet servers"
        )
