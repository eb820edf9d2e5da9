"""A FUSE file system that loses what was not fsynced: the power-loss fault of the nemesis.

Same idea as LazyFS (the C++ one etcd's robustness tests use), written over fusepy and
libfuse 2 (scripts/ensure_fuse.sh installs it). It passes operations through to a backing
store, but keeps every change in a cache of its own until it is made durable the way Linux
may make it durable, and no sooner:

- file data and size: by fsync or fdatasync of that file (both make data and size durable);
- directory entries (create, mkdir, rename, unlink, rmdir, link): by an fsync of the
  directory that holds them. A rename across directories needs both directories fsynced;
  a new file is reachable after a power loss only once its directory was fsynced, whatever
  was done to its data. A file whose entry is durable but whose data never was is empty.

Reads see the cached (unsynced) state. `power_loss` drops everything unsynced; with
`torn=True` the newest unsynced write (of a file not fsynced since) is torn at a 512 B
sector boundary: its largest sector-aligned proper prefix reaches the file, the rest does
not (nothing when the write lies within one sector). After it, `<store>/data` holds
exactly what was synced.

Layout of the store: `data/` is the durable tree, `objects/` holds one file per inode
that ever had durable content; every durable name in `data/` is a hard link to its object.
The backing files are not fsynced themselves: the power loss is simulated, the machine's
own does not matter here.

Run as a process: `python -m tests.nemesis.lazyfs --store S --mount M --control SOCK`;
`LazyFS` starts one, waits for the mount, sends commands to its control socket (one line
each: `ping`, `power_loss`, `power_loss torn`, `stats`; a JSON line answers) and unmounts
in `close()`. Symlinks, special files and extended attributes are refused (ENOTSUP).
Test-only code: never mount a real data dir on it.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fuse

log = logging.getLogger("nemesis.lazyfs")

PAGE_BYTES = 4096
SECTOR_BYTES = 512
COMMAND_BYTES_MAX = 256
MOUNT_TIMEOUT_S = 30.0
UNMOUNT_TIMEOUT_S = 30.0


# --- fallocate: libfuse 2.9 has it, fusepy 3.0.1's struct stops at ioctl ------------------
# posix_fallocate (the WAL preallocates its segments) would otherwise fall back to one
# 1-byte write per 4 KiB block through Python. The struct is libfuse 2.9's, field by field.
class _FuseOperations(ctypes.Structure):
    _fields_ = list(fuse.fuse_operations._fields_) + [
        ("poll", ctypes.c_void_p),
        ("write_buf", ctypes.c_void_p),
        ("read_buf", ctypes.c_void_p),
        ("flock", ctypes.c_void_p),
        (
            "fallocate",
            ctypes.CFUNCTYPE(
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_int,
                fuse.c_off_t,
                fuse.c_off_t,
                ctypes.POINTER(fuse.fuse_file_info),
            ),
        ),
    ]


class _Fuse(fuse.FUSE):
    """fusepy's FUSE with the fallocate entry point."""

    def fallocate(self, path, mode, offset, length, fip):  # noqa: ANN001 (ctypes callback)
        fh = fip.contents.fh if fip else None
        return self.operations(
            "fallocate", self._decode_optional_path(path), mode, offset, length, fh
        )


def _mount(ops: fuse.Operations, mountpoint: str, **options: Any) -> None:
    # FUSE.__init__ reads the struct type from its module: swap it for the mount only
    # (this process mounts once, from its main thread).
    saved = fuse.fuse_operations
    fuse.fuse_operations = _FuseOperations
    try:
        _Fuse(ops, mountpoint, **options)
    finally:
        fuse.fuse_operations = saved


# --- the model -----------------------------------------------------------------------------


def _err(code: int) -> fuse.FuseOSError:
    return fuse.FuseOSError(code)


@dataclass(eq=False, slots=True)
class _File:
    ino: int
    mode: int
    size: int = 0
    durable_size: int = 0
    # Bytes of the object at or beyond this offset are not the file's any more (a truncate
    # since the last sync cut them): they read as zeros.
    floor: int = 0
    has_object: bool = False
    pages: dict[int, bytearray] = field(default_factory=dict)
    mtime_ns: int = field(default_factory=time.time_ns)
    nlink: int = 0


@dataclass(eq=False, slots=True)
class _Dir:
    ino: int
    mode: int
    entries: dict[str, _File | _Dir] = field(default_factory=dict)
    durable: dict[str, _File | _Dir] = field(default_factory=dict)
    # Where this directory is in data/ (None: not reachable there).
    durable_parent: _Dir | None = None
    durable_name: str = ""
    is_root: bool = False
    mtime_ns: int = field(default_factory=time.time_ns)


_Node = _File | _Dir


@dataclass(frozen=True, slots=True)
class _LastWrite:
    node: _File
    offset: int
    data: bytes


class LazyOps(fuse.Operations):
    """The operations: a model of the current state over the durable tree in the store."""

    use_ns = True
    flag_nullpath_ok = True

    def __init__(self, store: Path) -> None:
        self.store = store
        self.data_dir = store / "data"
        self.objects_dir = store / "objects"
        self._mu = threading.RLock()
        self.next_ino = 1
        self.next_fh = 1
        self.handles: dict[int, _File] = {}
        self.dir_handles: dict[int, _Dir] = {}
        # The last unsynced write of each file, oldest first: the newest is the one a power
        # loss tears (a file fsynced since has none).
        self.last_writes: dict[int, _LastWrite] = {}
        self.generation = 0
        self.fsyncs = 0
        self.power_losses = 0
        self.root = self._load()

    # --- loading the durable tree ----------------------------------------------------------

    def _new_ino(self) -> int:
        self.next_ino += 1
        return self.next_ino

    def _load(self) -> _Dir:
        """Build the model from data/: what a machine finds on its disk after power-on."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.objects_dir, ignore_errors=True)
        self.objects_dir.mkdir()
        by_inode: dict[tuple[int, int], _File] = {}
        root = _Dir(ino=1, mode=stat.S_IFDIR | 0o755, is_root=True)

        def walk(d: _Dir, path: Path) -> None:
            for entry in sorted(os.scandir(path), key=lambda e: e.name):
                st = entry.stat(follow_symlinks=False)
                node: _Node
                if stat.S_ISDIR(st.st_mode):
                    node = _Dir(
                        ino=self._new_ino(),
                        mode=st.st_mode,
                        durable_parent=d,
                        durable_name=entry.name,
                        mtime_ns=st.st_mtime_ns,
                    )
                    walk(node, Path(entry.path))
                elif stat.S_ISREG(st.st_mode):
                    key = (st.st_dev, st.st_ino)
                    found = by_inode.get(key)
                    if found is None:
                        found = _File(
                            ino=self._new_ino(),
                            mode=st.st_mode,
                            size=st.st_size,
                            durable_size=st.st_size,
                            floor=st.st_size,
                            has_object=True,
                            mtime_ns=st.st_mtime_ns,
                        )
                        os.link(entry.path, self._object(found))
                        by_inode[key] = found
                    node = found
                else:
                    log.warning("lazyfs: %s is not a file or directory: left out", entry.path)
                    continue
                if isinstance(node, _File):
                    node.nlink += 1
                d.entries[entry.name] = node
                d.durable[entry.name] = node

        walk(root, self.data_dir)
        return root

    def _object(self, f: _File) -> Path:
        return self.objects_dir / str(f.ino)

    def _durable_path(self, d: _Dir) -> Path | None:
        parts: list[str] = []
        cur: _Dir | None = d
        while cur is not None and not cur.is_root:
            parts.append(cur.durable_name)
            cur = cur.durable_parent
        if cur is None:
            return None
        return self.data_dir.joinpath(*reversed(parts))

    # --- power loss ---------------------------------------------------------------------

    def power_loss(self, torn: bool) -> dict[str, Any]:
        """Drop everything unsynced (and tear the last write when asked), then reload."""
        with self._mu:
            dropped_pages = 0
            stack: list[_Dir] = [self.root]
            seen: set[int] = set()
            while stack:
                d = stack.pop()
                for node in d.entries.values():
                    if node.ino in seen:
                        continue
                    seen.add(node.ino)
                    if isinstance(node, _Dir):
                        stack.append(node)
                    else:
                        dropped_pages += len(node.pages)
            torn_bytes = -1
            lw = next(reversed(self.last_writes.values()), None)
            if torn and lw is not None and lw.node.has_object:
                end = lw.offset + len(lw.data)
                cut = (end - 1) // SECTOR_BYTES * SECTOR_BYTES
                keep = max(0, cut - lw.offset)
                torn_bytes = keep
                if keep > 0:
                    fd = os.open(self._object(lw.node), os.O_WRONLY)
                    try:
                        os.pwrite(fd, lw.data[:keep], lw.offset)
                    finally:
                        os.close(fd)
            self.handles.clear()
            self.dir_handles.clear()
            self.last_writes.clear()
            self.generation += 1
            self.power_losses += 1
            self.root = self._load()
            log.info(
                "lazyfs: power loss %d: dropped %d cached pages, torn write kept %d bytes",
                self.power_losses,
                dropped_pages,
                torn_bytes,
            )
            return {"dropped_pages": dropped_pages, "torn_bytes_kept": torn_bytes}

    def stats(self) -> dict[str, Any]:
        with self._mu:
            return {
                "fsyncs": self.fsyncs,
                "power_losses": self.power_losses,
                "handles": len(self.handles),
            }

    # --- lookups ----------------------------------------------------------------------------

    def _lookup(self, path: str) -> _Node:
        node: _Node = self.root
        for part in path.split("/"):
            if not part:
                continue
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR)
            child = node.entries.get(part)
            if child is None:
                raise _err(errno.ENOENT)
            node = child
        return node

    def _parent(self, path: str) -> tuple[_Dir, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not isinstance(parent, _Dir):
            raise _err(errno.ENOTDIR)
        if not name or name in (".", ".."):
            raise _err(errno.EINVAL)
        return parent, name

    def _file(self, path: str | None, fh: int | None) -> _File:
        if fh:
            f = self.handles.get(fh)
            if f is None:
                raise _err(errno.EIO)  # a handle from before a power loss
            return f
        if path is None:
            raise _err(errno.EBADF)
        node = self._lookup(path)
        if not isinstance(node, _File):
            raise _err(errno.EISDIR)
        return node

    # --- file data ----------------------------------------------------------------------

    def _base_read(self, f: _File, offset: int, size: int) -> bytearray:
        """The durable bytes of [offset, offset+size), zeros past the floor."""
        out = bytearray(size)
        end = min(offset + size, f.floor, f.durable_size)
        if f.has_object and end > offset:
            fd = os.open(self._object(f), os.O_RDONLY)
            try:
                got = os.pread(fd, end - offset, offset)
            finally:
                os.close(fd)
            out[: len(got)] = got
        return out

    def _page(self, f: _File, pno: int) -> bytearray:
        page = f.pages.get(pno)
        if page is None:
            page = self._base_read(f, pno * PAGE_BYTES, PAGE_BYTES)
            # Bytes past the current size read as zeros when the file grows again.
            cut = f.size - pno * PAGE_BYTES
            if cut < PAGE_BYTES:
                page[max(0, cut) :] = bytes(PAGE_BYTES - max(0, cut))
            f.pages[pno] = page
        return page

    def _read(self, f: _File, size: int, offset: int) -> bytes:
        size = max(0, min(size, f.size - offset))
        if size == 0:
            return b""
        out = self._base_read(f, offset, size)
        first, last = offset // PAGE_BYTES, (offset + size - 1) // PAGE_BYTES
        if f.pages:
            for pno in range(first, last + 1):
                page = f.pages.get(pno)
                if page is None:
                    continue
                p0 = pno * PAGE_BYTES
                lo, hi = max(offset, p0), min(offset + size, p0 + PAGE_BYTES)
                out[lo - offset : hi - offset] = page[lo - p0 : hi - p0]
        return bytes(out)

    def _write(self, f: _File, data: bytes, offset: int) -> int:
        end = offset + len(data)
        pos = offset
        while pos < end:
            pno = pos // PAGE_BYTES
            p0 = pno * PAGE_BYTES
            n = min(end, p0 + PAGE_BYTES) - pos
            self._page(f, pno)[pos - p0 : pos - p0 + n] = data[pos - offset : pos - offset + n]
            pos += n
        f.size = max(f.size, end)
        f.mtime_ns = time.time_ns()
        self.last_writes.pop(f.ino, None)
        self.last_writes[f.ino] = _LastWrite(f, offset, bytes(data))
        return len(data)

    def _truncate(self, f: _File, length: int) -> None:
        if length < f.size:
            for pno in list(f.pages):
                p0 = pno * PAGE_BYTES
                if p0 >= length:
                    del f.pages[pno]
                elif p0 + PAGE_BYTES > length:
                    page = f.pages[pno]
                    page[length - p0 :] = bytes(p0 + PAGE_BYTES - length)
            f.floor = min(f.floor, length)
        f.size = length
        f.mtime_ns = time.time_ns()

    def _sync_file(self, f: _File) -> None:
        """fsync/fdatasync: the cached data and the size reach the object."""
        fd = os.open(self._object(f), os.O_RDWR | os.O_CREAT, stat.S_IMODE(f.mode))
        try:
            if f.floor < f.durable_size:
                os.ftruncate(fd, f.floor)
            for pno, page in sorted(f.pages.items()):
                p0 = pno * PAGE_BYTES
                n = min(PAGE_BYTES, f.size - p0)
                if n > 0:
                    os.pwrite(fd, page[:n], p0)
            os.ftruncate(fd, f.size)
        finally:
            os.close(fd)
        f.has_object = True
        f.pages.clear()
        f.durable_size = f.floor = f.size
        self.last_writes.pop(f.ino, None)

    # --- directory entries -----------------------------------------------------------------

    def _ensure_object(self, f: _File) -> Path:
        obj = self._object(f)
        if not f.has_object:
            fd = os.open(obj, os.O_WRONLY | os.O_CREAT, stat.S_IMODE(f.mode))
            os.close(fd)
            f.has_object = True
            f.durable_size = 0
            f.floor = 0
        return obj

    def _remove_backing(self, path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)

    def _forget_durable(self, d: _Dir) -> None:
        """d's tree left data/: no directory in it is reachable there any more."""
        d.durable_parent = None
        for child in d.durable.values():
            if isinstance(child, _Dir) and child.durable_parent is d:
                self._forget_durable(child)

    def _link_child(self, parent_path: Path, parent: _Dir, name: str, node: _Node) -> None:
        target = parent_path / name
        if isinstance(node, _File):
            self._remove_backing(target)
            os.link(self._ensure_object(node), target)
            return
        old = self._durable_path(node)
        if old is not None:
            # A directory moved: data/ cannot hold it twice, so the move is whole.
            self._remove_backing(target)
            os.rename(old, target)
            old_parent = node.durable_parent
            if old_parent is not None and old_parent.durable.get(node.durable_name) is node:
                del old_parent.durable[node.durable_name]
        else:
            self._remove_backing(target)
            os.mkdir(target, stat.S_IMODE(node.mode))
            for child_name, child in node.durable.items():
                self._link_child(target, node, child_name, child)
        node.durable_parent = parent
        node.durable_name = name

    def _sync_dir(self, d: _Dir) -> None:
        """fsync of a directory: its entries, as they are now, become durable."""
        path = self._durable_path(d)
        if path is not None:
            for name, old in list(d.durable.items()):
                if d.entries.get(name) is old:
                    continue
                if isinstance(old, _Dir):
                    if old.durable_parent is d and old.durable_name == name:
                        self._remove_backing(path / name)
                        self._forget_durable(old)
                else:
                    self._remove_backing(path / name)
            for name, node in d.entries.items():
                if d.durable.get(name) is not node or (
                    isinstance(node, _Dir) and node.durable_parent is not d
                ):
                    self._link_child(path, d, name, node)
        d.durable = dict(d.entries)

    # --- fuse operations --------------------------------------------------------------------

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        with self._mu:
            node = self._file(path, fh) if fh else self._lookup(path or "/")
            now = node.mtime_ns
            if isinstance(node, _Dir):
                size, nlink = 4096, 2
            else:
                size, nlink = node.size, max(1, node.nlink)
            return {
                "st_mode": node.mode,
                "st_ino": node.ino,
                "st_nlink": nlink,
                "st_size": size,
                "st_blocks": (size + 511) // 512,
                "st_blksize": PAGE_BYTES,
                "st_uid": os.getuid(),
                "st_gid": os.getgid(),
                "st_atime": now,
                "st_mtime": now,
                "st_ctime": now,
            }

    def readdir(self, path: str | None, fh: int) -> list[str]:
        with self._mu:
            d = self.dir_handles.get(fh) if fh else None
            node = d if d is not None else self._lookup(path or "/")
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR)
            return [".", "..", *node.entries]

    def opendir(self, path: str) -> int:
        with self._mu:
            node = self._lookup(path)
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR)
            self.next_fh += 1
            self.dir_handles[self.next_fh] = node
            return self.next_fh

    def releasedir(self, path: str | None, fh: int) -> int:
        with self._mu:
            self.dir_handles.pop(fh, None)
            return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mu:
            d = self.dir_handles.get(fh) if fh else None
            node = d if d is not None else self._lookup(path or "/")
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR)
            self._sync_dir(node)
            self.fsyncs += 1
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mu:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise _err(errno.EEXIST)
            parent.entries[name] = _Dir(ino=self._new_ino(), mode=stat.S_IFDIR | (mode & 0o7777))
            parent.mtime_ns = time.time_ns()
            return 0

    def rmdir(self, path: str) -> int:
        with self._mu:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _err(errno.ENOENT)
            if not isinstance(node, _Dir):
                raise _err(errno.ENOTDIR)
            if node.entries:
                raise _err(errno.ENOTEMPTY)
            del parent.entries[name]
            parent.mtime_ns = time.time_ns()
            return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mu:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = _File(ino=self._new_ino(), mode=stat.S_IFREG | (mode & 0o7777), nlink=1)
                parent.entries[name] = node
                parent.mtime_ns = time.time_ns()
            elif not isinstance(node, _File):
                raise _err(errno.EISDIR)
            self.next_fh += 1
            self.handles[self.next_fh] = node
            return self.next_fh

    def open(self, path: str, flags: int) -> int:
        with self._mu:
            node = self._lookup(path)
            if not isinstance(node, _File):
                raise _err(errno.EISDIR)
            self.next_fh += 1
            self.handles[self.next_fh] = node
            return self.next_fh

    def release(self, path: str | None, fh: int) -> int:
        with self._mu:
            self.handles.pop(fh, None)
            return 0

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        with self._mu:
            return self._read(self._file(path, fh), size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        with self._mu:
            return self._write(self._file(path, fh), data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        with self._mu:
            self._truncate(self._file(path, fh), length)
            return 0

    def fallocate(
        self, path: str | None, mode: int, offset: int, length: int, fh: int | None
    ) -> int:
        if mode != 0:
            raise _err(errno.EOPNOTSUPP)
        with self._mu:
            f = self._file(path, fh)
            if offset + length > f.size:
                self._truncate(f, offset + length)
            return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        with self._mu:
            self._sync_file(self._file(path, fh))
            self.fsyncs += 1
            return 0

    def unlink(self, path: str) -> int:
        with self._mu:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                raise _err(errno.ENOENT)
            if isinstance(node, _Dir):
                raise _err(errno.EISDIR)
            del parent.entries[name]
            node.nlink -= 1
            parent.mtime_ns = time.time_ns()
            return 0

    def link(self, target: str, source: str) -> int:
        # fusepy: link(target=new name, source=existing file)
        with self._mu:
            node = self._lookup(source)
            if not isinstance(node, _File):
                raise _err(errno.EPERM)
            parent, name = self._parent(target)
            if name in parent.entries:
                raise _err(errno.EEXIST)
            parent.entries[name] = node
            node.nlink += 1
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mu:
            src_parent, src_name = self._parent(old)
            node = src_parent.entries.get(src_name)
            if node is None:
                raise _err(errno.ENOENT)
            dst_parent, dst_name = self._parent(new)
            if isinstance(node, _Dir) and self._is_under(dst_parent, node):
                raise _err(errno.EINVAL)  # not into itself
            existing = dst_parent.entries.get(dst_name)
            if existing is node:
                return 0
            if existing is not None:
                if isinstance(existing, _Dir):
                    if not isinstance(node, _Dir):
                        raise _err(errno.EISDIR)
                    if existing.entries:
                        raise _err(errno.ENOTEMPTY)
                elif isinstance(node, _Dir):
                    raise _err(errno.ENOTDIR)
                else:
                    existing.nlink -= 1
            del src_parent.entries[src_name]
            dst_parent.entries[dst_name] = node
            now = time.time_ns()
            src_parent.mtime_ns = dst_parent.mtime_ns = now
            return 0

    def _is_under(self, d: _Dir, ancestor: _Dir) -> bool:
        stack: list[_Dir] = [ancestor]
        while stack:
            cur = stack.pop()
            if cur is d:
                return True
            stack.extend(c for c in cur.entries.values() if isinstance(c, _Dir))
        return False

    def chmod(self, path: str, mode: int) -> int:
        with self._mu:
            node = self._lookup(path)
            node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
            return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        with self._mu:
            self._lookup(path)
            return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self._mu:
            node = self._lookup(path)
            node.mtime_ns = times[1] if times else time.time_ns()
            return 0

    def access(self, path: str, amode: int) -> int:
        with self._mu:
            self._lookup(path)
            return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self.data_dir)
        return {
            key: getattr(sv, key)
            for key in (
                "f_bavail",
                "f_bfree",
                "f_blocks",
                "f_bsize",
                "f_favail",
                "f_ffree",
                "f_files",
                "f_flag",
                "f_frsize",
                "f_namemax",
            )
        }

    def symlink(self, target: str, source: str) -> int:
        raise _err(errno.ENOTSUP)

    def mknod(self, path: str, mode: int, dev: int) -> int:
        raise _err(errno.ENOTSUP)


# --- control socket -----------------------------------------------------------------------


def _serve_control(ops: LazyOps, sock_path: Path) -> None:
    """One command per connection: a line in, a JSON line out."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(sock_path))
    srv.listen(4)
    while True:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(10.0)
            try:
                line = conn.recv(COMMAND_BYTES_MAX).decode().strip()
                words = line.split()
                if words == ["ping"]:
                    answer: dict[str, Any] = {"ok": True}
                elif words and words[0] == "power_loss" and words[1:] in ([], ["torn"]):
                    answer = {"ok": True, **ops.power_loss(torn=words[1:] == ["torn"])}
                elif words == ["stats"]:
                    answer = {"ok": True, **ops.stats()}
                else:
                    answer = {"ok": False, "error": f"unknown command {line!r}"}
            except Exception as e:  # noqa: BLE001 (the answer carries it to the test)
                log.exception("lazyfs: control command failed")
                answer = {"ok": False, "error": repr(e)}
            conn.sendall(json.dumps(answer).encode() + b"\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lazyfs", description=__doc__.split("\n")[0])
    p.add_argument("--store", required=True, type=Path)
    p.add_argument("--mount", required=True, type=Path)
    p.add_argument("--control", required=True, type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    ops = LazyOps(args.store)
    threading.Thread(
        target=_serve_control, args=(ops, args.control), name="lazyfs-control", daemon=True
    ).start()
    _mount(
        ops,
        str(args.mount),
        foreground=True,
        fsname="lazyfs",
        big_writes=True,
        max_write=128 * 1024,
        hard_remove=True,
        # The kernel must ask again after a power loss: no cached names or sizes.
        entry_timeout=0,
        attr_timeout=0,
        negative_timeout=0,
    )
    return 0


# --- the handle tests use ------------------------------------------------------------------


class LazyFS:
    """A lazyfs process: store (durable) under `store`, mounted at `mount`."""

    def __init__(self, store: Path, mount: Path, log_path: Path | None = None) -> None:
        self.store = Path(store)
        self.mount = Path(mount)
        self.control = self.store / "control.sock"
        self.log_path = log_path or self.store / "lazyfs.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def data_dir(self) -> Path:
        """The durable tree (what the disk holds)."""
        return self.store / "data"

    def start(self) -> LazyFS:
        self.store.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.control.unlink(missing_ok=True)
        root = Path(__file__).resolve().parents[2]
        with open(self.log_path, "ab") as logf:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.nemesis.lazyfs",
                    "--store",
                    str(self.store),
                    "--mount",
                    str(self.mount),
                    "--control",
                    str(self.control),
                ],
                cwd=root,
                stdout=logf,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_started(time.monotonic() + MOUNT_TIMEOUT_S)
        except BaseException:
            self.close()  # never leave a mount behind
            raise
        return self

    def _wait_started(self, deadline: float) -> None:
        """Until the mount is there and the control socket answers (its file exists from
        bind, before listen: a ping can be refused for a moment)."""
        assert self.proc is not None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"lazyfs exited with {self.proc.returncode}: "
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            if os.path.ismount(self.mount) and self.control.exists():
                try:
                    self.command("ping")
                    return
                except (ConnectionRefusedError, FileNotFoundError):
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"lazyfs did not mount {self.mount}")
            time.sleep(0.05)

    def command(self, line: str) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(60.0)
            s.connect(str(self.control))
            s.sendall(line.encode() + b"\n")
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
        answer = json.loads(buf)
        if not answer.get("ok"):
            raise RuntimeError(f"lazyfs {line!r}: {answer.get('error')}")
        return answer

    def power_loss(self, torn: bool = False) -> dict[str, Any]:
        """Drop every unsynced change; the processes using the mount must be dead already."""
        return self.command("power_loss torn" if torn else "power_loss")

    def close(self) -> None:
        if self.proc is None:
            return
        if os.path.ismount(self.mount):
            res = subprocess.run(["fusermount", "-u", str(self.mount)], capture_output=True)
            if res.returncode != 0:
                # Busy (a file still open on it): detach it; its users get ENOTCONN once
                # the file system process is gone.
                subprocess.run(["fusermount", "-u", "-z", str(self.mount)], capture_output=True)
                self.proc.terminate()
        elif self.proc.poll() is None:
            self.proc.terminate()  # it never mounted: nothing else would stop it
        try:
            self.proc.wait(timeout=UNMOUNT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=UNMOUNT_TIMEOUT_S)
        self.proc = None

    def __enter__(self) -> LazyFS:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(main())
