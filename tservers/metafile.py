"""Small metadata files: instance, superblock and consensus metadata.

Format: 4-byte magic naming the kind, u32 version, u32 payload length, u32 CRC32C of the
payload, then the payload (a protobuf). Written to a temp file in the same directory,
fsynced, renamed over the target, and the directory fsynced, so a reader sees the old file
or the new one, never a mix. Reading checks everything and raises `MetaFileCorrupt` naming
the file and what is wrong.
"""

from __future__ import annotations

import os
import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import crc32c
from google.protobuf.message import DecodeError, Message

VERSION = 1
_HEADER = struct.Struct("<4sIII")
PAYLOAD_BYTES_MAX = 16 << 20

MAGIC_INSTANCE = b"TSIN"
MAGIC_SUPERBLOCK = b"TSSB"
MAGIC_CMETA = b"TSCM"
MAGIC_PRINCIPALS = b"TSPT"  # the principals table last pushed (tservers/principals.py)

M = TypeVar("M", bound=Message)


class MetaFileCorrupt(Exception):
    """A metadata file failed its checks; the message says which file and why."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install_file(tmp: Path, path: Path) -> None:
    """Make a fully written `tmp` durable under the name `path`: fsync its data, rename it
    over `path`, fsync the directory (a crash leaves the old file or the new one)."""
    _fsync_path(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def encode(magic: bytes, msg: Message, version: int = VERSION) -> bytes:
    payload = msg.SerializeToString()
    assert len(magic) == 4 and len(payload) <= PAYLOAD_BYTES_MAX
    return _HEADER.pack(magic, version, len(payload), crc32c.crc32c(payload)) + payload


def header_version(data: bytes) -> int:
    """The version in a metadata file's header (0: too short to have one)."""
    return _HEADER.unpack_from(data)[1] if len(data) >= _HEADER.size else 0


def decode(
    magic: bytes,
    data: bytes,
    msg_type: type[M],
    where: str = "",
    versions: tuple[int, ...] = (VERSION,),
) -> M:
    if len(data) < _HEADER.size:
        raise MetaFileCorrupt(f"{where}: file too short ({len(data)} bytes)")
    got_magic, version, length, crc = _HEADER.unpack_from(data)
    if got_magic != magic:
        raise MetaFileCorrupt(f"{where}: bad magic {got_magic!r}, expected {magic!r}")
    if version not in versions:
        raise MetaFileCorrupt(f"{where}: unsupported version {version}")
    payload = data[_HEADER.size :]
    if len(payload) != length:
        raise MetaFileCorrupt(f"{where}: length {len(payload)} bytes, header says {length}")
    if crc32c.crc32c(payload) != crc:
        raise MetaFileCorrupt(f"{where}: CRC mismatch")
    msg = msg_type()
    try:
        msg.ParseFromString(payload)
    except DecodeError as e:
        raise MetaFileCorrupt(f"{where}: undecodable payload: {e}") from e
    return msg


def write_atomic(path: Path, data: bytes, *, sync: bool = True, mode: int = 0o644) -> None:
    """Temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(path.name + ".tmp")
    _write_file(tmp, data, mode, sync=sync)
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def _write_file(path: Path, data: bytes, mode: int, *, sync: bool) -> None:
    """`data` written to `path` (created or truncated), fsynced when `sync`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # a temp file left by a crash may have had another mode
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# Threads syncing the temp files of `write_meta_many` together: the file system commits
# concurrent syncs in one journal transaction.
SYNC_THREADS = 8
_sync_pool: ThreadPoolExecutor | None = None
_sync_pool_lock = threading.Lock()


def write_meta_many(items: list[tuple[Path, bytes, Message]], *, mode: int = 0o644) -> None:
    """Several metadata files made durable together (the consensus metadata of every tablet
    whose term changed in one Raft driver round: thousands at a restart): each written to its
    temp file, the temp files synced together (up to SYNC_THREADS at once), each renamed
    over its target, each distinct directory fsynced once. Each file ends as write_meta
    leaves it; a crash leaves each with its old contents or its new. Raises the first
    OSError (which files were renamed is then unknown, as after a crash)."""
    global _sync_pool
    if len(items) == 1:
        write_meta(*items[0], mode=mode)
        return
    tmps: list[tuple[Path, Path]] = []
    for path, magic, msg in items:
        data = encode(magic, msg)
        assert decode(magic, data, type(msg), str(path)) == msg
        tmp = path.with_name(path.name + ".tmp")
        _write_file(tmp, data, mode, sync=False)
        tmps.append((tmp, path))
    with _sync_pool_lock:
        if _sync_pool is None:
            _sync_pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="meta-sync")
        pool = _sync_pool
    for f in [pool.submit(_fsync_path, tmp) for tmp, _ in tmps]:
        f.result()
    for tmp, path in tmps:
        os.replace(tmp, path)
    for d in sorted({path.parent for _, path in tmps}):
        fsync_dir(d)


def write_meta(
    path: Path, magic: bytes, msg: Message, *, mode: int = 0o644, version: int = VERSION
) -> None:
    data = encode(magic, msg, version)
    # Same property on both paths: what we write must decode to what we meant.
    assert decode(magic, data, type(msg), str(path), (version,)) == msg
    write_atomic(path, data, mode=mode)


# A metadata file is read with one read of this size (a superblock or consensus metadata is
# well under it), more only when that read comes back full: no buffered file object, and no
# buffer of the largest payload allocated per file (10,000 of each at a restart, issue 28).
_READ_CHUNK_BYTES = 64 << 10


def read_file(path: Path | str, limit_bytes: int) -> bytes:
    """The first `limit_bytes` bytes of a file (all of it when shorter): open, read, close."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.read(fd, min(_READ_CHUNK_BYTES, limit_bytes))
        if len(data) < _READ_CHUNK_BYTES or len(data) >= limit_bytes:
            return data
        parts = [data]
        got = len(data)
        while got < limit_bytes:
            more = os.read(fd, min(limit_bytes - got, 1 << 20))
            if not more:
                break
            parts.append(more)
            got += len(more)
        return b"".join(parts)
    finally:
        os.close(fd)


def read_meta(
    path: Path | str, magic: bytes, msg_type: type[M], versions: tuple[int, ...] = (VERSION,)
) -> M:
    data = read_file(path, PAYLOAD_BYTES_MAX + _HEADER.size + 1)
    return decode(magic, data, msg_type, str(path), versions)
