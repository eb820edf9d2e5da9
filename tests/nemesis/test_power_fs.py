"""The power-loss file system's semantics, on real FUSE mounts (tests/nemesis/lazyfs.py).

What survives a power loss is what Linux may keep at the least: file data and size once the
file was fsynced, directory entries once their directory was. Then the project's durable
helpers on it: tservers/metafile.py's write_atomic and the logstore journal.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from logstore import journal as journal_mod
from logstore.journal import DurableJournal
from rpc import keys
from tests.nemesis.lazyfs import SECTOR_BYTES, LazyFS
from tservers import metafile
from tservers.fs import FsLayout

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse"),
]


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyFS]:
    with LazyFS(tmp_path / "store", tmp_path / "mnt") as fs:
        yield fs


def fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, *, sync: bool, offset: int | None = None) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (0 if offset is not None else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        os.pwrite(fd, data, offset or 0)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_unsynced_write_is_gone_and_synced_data_stays(lazy: LazyFS) -> None:
    m = lazy.mount
    write_file(m / "kept", b"durable", sync=True)
    write_file(m / "lost", b"only cached", sync=False)
    fsync_path(m)  # both names durable; only "kept" has durable data
    write_file(m / "kept", b"DUR", sync=False, offset=0)
    assert (m / "kept").read_bytes() == b"DURable"  # reads see the cache
    assert (lazy.data_dir / "kept").read_bytes() == b"durable"  # the disk does not

    lazy.power_loss()

    assert sorted(os.listdir(m)) == ["kept", "lost"]
    assert (m / "kept").read_bytes() == b"durable"
    assert (m / "lost").read_bytes() == b""
    assert (lazy.data_dir / "kept").read_bytes() == b"durable"


def test_new_file_without_directory_fsync_is_gone(lazy: LazyFS) -> None:
    m = lazy.mount
    (m / "d").mkdir()
    fsync_path(m)
    write_file(m / "d" / "f", b"data fsynced, name not", sync=True)
    assert os.listdir(m / "d") == ["f"]
    lazy.power_loss()
    assert os.listdir(m / "d") == []
    assert os.listdir(lazy.data_dir / "d") == []


def test_rename_without_directory_fsync_is_undone(lazy: LazyFS) -> None:
    m = lazy.mount
    write_file(m / "target", b"old", sync=True)
    fsync_path(m)
    write_file(m / "target.tmp", b"new", sync=True)
    os.replace(m / "target.tmp", m / "target")
    assert (m / "target").read_bytes() == b"new"
    lazy.power_loss()
    assert os.listdir(m) == ["target"]
    assert (m / "target").read_bytes() == b"old"

    # The same with the directory fsync: the rename holds.
    write_file(m / "target.tmp", b"new", sync=True)
    os.replace(m / "target.tmp", m / "target")
    fsync_path(m)
    lazy.power_loss()
    assert os.listdir(m) == ["target"]
    assert (m / "target").read_bytes() == b"new"


def test_unlink_and_mkdir_need_their_directory_fsync(lazy: LazyFS) -> None:
    m = lazy.mount
    write_file(m / "gone", b"x", sync=True)
    (m / "sub").mkdir()
    (m / "sub" / "inner").mkdir()
    fsync_path(m / "sub")  # sub's entries durable, but sub itself is not reachable yet
    fsync_path(m)
    os.unlink(m / "gone")
    lazy.power_loss()
    assert sorted(os.listdir(m)) == ["gone", "sub"]
    assert os.listdir(m / "sub") == ["inner"]

    os.unlink(m / "gone")
    fsync_path(m)
    lazy.power_loss()
    assert os.listdir(m) == ["sub"]


def test_rename_across_directories_needs_both(lazy: LazyFS) -> None:
    m = lazy.mount
    (m / "a").mkdir()
    (m / "b").mkdir()
    fsync_path(m)
    write_file(m / "a" / "f", b"payload", sync=True)
    fsync_path(m / "a")
    os.rename(m / "a" / "f", m / "b" / "f")
    fsync_path(m / "b")  # the new name is durable; the old one too, until a is fsynced
    lazy.power_loss()
    assert os.listdir(m / "b") == ["f"]
    assert (m / "b" / "f").read_bytes() == b"payload"
    assert os.listdir(m / "a") == ["f"]
    os.unlink(m / "a" / "f")
    fsync_path(m / "a")
    lazy.power_loss()
    assert os.listdir(m / "a") == []
    assert (m / "b" / "f").read_bytes() == b"payload"

    # A directory moved and both parents fsynced moves whole.
    (m / "a" / "dir").mkdir()
    write_file(m / "a" / "dir" / "g", b"g", sync=True)
    fsync_path(m / "a" / "dir")
    fsync_path(m / "a")
    os.rename(m / "a" / "dir", m / "b" / "dir")
    fsync_path(m / "b")
    fsync_path(m / "a")
    lazy.power_loss()
    assert os.listdir(m / "a") == []
    assert (m / "b" / "dir" / "g").read_bytes() == b"g"


def test_truncate_and_size(lazy: LazyFS) -> None:
    m = lazy.mount
    write_file(m / "f", b"a" * 10_000, sync=True)
    fsync_path(m)
    os.truncate(m / "f", 100)
    write_file(m / "f", b"b", sync=False, offset=5_000)
    data = (m / "f").read_bytes()
    assert data == b"a" * 100 + bytes(4_900) + b"b"  # the cut bytes read as zeros
    lazy.power_loss()
    assert (m / "f").read_bytes() == b"a" * 10_000

    os.truncate(m / "f", 100)
    fsync_path(m / "f")
    lazy.power_loss()
    assert (m / "f").read_bytes() == b"a" * 100

    # Preallocation (the WAL's posix_fallocate) changes the size, durable with an fsync.
    fd = os.open(m / "f", os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 1 << 20)
        assert os.fstat(fd).st_size == 1 << 20
        os.fsync(fd)
    finally:
        os.close(fd)
    lazy.power_loss()
    assert os.stat(m / "f").st_size == 1 << 20


def test_torn_write_at_a_sector_boundary(lazy: LazyFS) -> None:
    m = lazy.mount
    write_file(m / "f", b"o" * 4096, sync=True)
    fsync_path(m)
    write_file(m / "f", b"n" * 10, sync=False, offset=0)  # an earlier unsynced write: lost
    new = bytes(range(256)) * 6  # 1536 bytes from offset 700: sectors end at 1024, 1536, 2048
    write_file(m / "f", new, sync=False, offset=700)
    answer = lazy.power_loss(torn=True)
    # The largest sector-aligned proper prefix of the write: up to offset 2048.
    assert answer["torn_bytes_kept"] == 2048 - 700
    data = (m / "f").read_bytes()
    assert data[:700] == b"o" * 700
    assert data[700:2048] == new[: 2048 - 700]
    assert data[2048:] == b"o" * (4096 - 2048)
    assert (2048 - 700) % SECTOR_BYTES != 0  # the write did not start on a sector


def test_open_unlinked_file_and_mmap(lazy: LazyFS) -> None:
    m = lazy.mount
    write_file(m / "f", b"z" * 8192, sync=True)
    fsync_path(m)
    with open(m / "f", "r+b") as f:
        os.unlink(m / "f")
        f.write(b"still writable")
        f.flush()
        f.seek(0)
        assert f.read(5) == b"still"
    with open(m / "g", "wb") as f:
        f.write(b"q" * 5000)
    with open(m / "g", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert mm[4990:5000] == b"q" * 10
    lazy.power_loss()
    assert os.listdir(m) == ["f"]
    assert (m / "f").read_bytes() == b"z" * 8192


def test_metafile_write_atomic(lazy: LazyFS) -> None:
    m = lazy.mount
    path = m / "superblock"
    metafile.write_atomic(path, b"version 1")
    metafile.write_atomic(path, b"version 2")
    lazy.power_loss()
    assert os.listdir(m) == ["superblock"]
    assert path.read_bytes() == b"version 2"

    # Without its fsyncs the new version is lost: the file system is what catches it.
    metafile.write_atomic(path, b"version 3", sync=False)
    assert path.read_bytes() == b"version 3"
    lazy.power_loss()
    assert path.read_bytes() == b"version 2"
    assert os.listdir(m) == ["superblock"]


def _commands(n: int, start: int = 0) -> list[bytes]:
    return [f"command {i} ".encode() * 20 for i in range(start, start + n)]


def test_logstore_journal_keeps_synced_records(lazy: LazyFS) -> None:
    d = str(lazy.mount / "journal")
    j = DurableJournal(d)
    for i, cmd in enumerate(_commands(5)):
        j.add(cmd, i + 1, 1)
    assert j.sync()
    for i, cmd in enumerate(_commands(3, start=5)):
        j.add(cmd, i + 6, 1)  # buffered, never written
    lazy.power_loss()  # the journal's fd dies with the "machine"
    again = DurableJournal(d)
    assert [e[0] for e in again._entries] == _commands(5)
    again.close()


def test_logstore_journal_torn_tail_is_cut(lazy: LazyFS, monkeypatch: pytest.MonkeyPatch) -> None:
    d = str(lazy.mount / "journal")
    j = DurableJournal(d)
    for i, cmd in enumerate(_commands(5)):
        j.add(cmd, i + 1, 1)
    assert j.sync()
    # The broken build: records written but not fdatasynced, then the power goes mid-write.
    monkeypatch.setenv(journal_mod.UNSAFE_NO_FDATASYNC_ENV, "1")
    broken = DurableJournal(d)
    assert len(broken._entries) == 5
    for i, cmd in enumerate(_commands(6, start=5)):
        broken.add(cmd, i + 6, 1)
    assert broken.sync()
    assert len(DurableJournal(d)._entries) == 11  # reads see the cache
    answer = lazy.power_loss(torn=True)
    assert answer["torn_bytes_kept"] > 0
    monkeypatch.delenv(journal_mod.UNSAFE_NO_FDATASYNC_ENV)
    again = DurableJournal(d)
    got = [e[0] for e in again._entries]
    # Every synced record, then whole records of the torn prefix only, then a cut tail.
    assert got[:5] == _commands(5)
    assert got == _commands(len(got))
    assert 5 <= len(got) < 11
    assert again.torn_bytes_cut > 0
    again.close()


def test_logstore_journal_group_commit_torn_past_a_hole(
    lazy: LazyFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One group commit of more than 128 KiB reaches FUSE as several writes; the power goes
    before its fdatasync: the earlier pieces are lost (a hole) and the last one is torn at a
    sector. The synced records must come back and the replica must open (the old scan
    called the valid records past the hole corruption in the middle)."""
    d = str(lazy.mount / "journal")
    j = DurableJournal(d)
    for i, cmd in enumerate(_commands(5)):
        j.add(cmd, i + 1, 1)
    assert j.sync()
    j.close()
    # The group commit's write happens; the power goes before its fdatasync returns.
    monkeypatch.setenv(journal_mod.UNSAFE_NO_FDATASYNC_ENV, "1")
    unsynced = DurableJournal(d)
    for i, cmd in enumerate(_commands(700, start=5)):  # ~250 KiB: two FUSE writes at least
        unsynced.add(cmd, i + 6, 1)
    assert unsynced.sync()
    answer = lazy.power_loss(torn=True)
    assert answer["torn_bytes_kept"] > SECTOR_BYTES
    monkeypatch.delenv(journal_mod.UNSAFE_NO_FDATASYNC_ENV)
    on_disk = (lazy.data_dir / "journal" / "journal").read_bytes()
    synced_end = journal_mod.HEADER_SIZE + sum(
        len(journal_mod.encode_record(c, 1, 1)) for c in _commands(5)
    )
    assert on_disk[synced_end : synced_end + SECTOR_BYTES] == bytes(SECTOR_BYTES)  # the hole
    again = DurableJournal(d)
    assert [e[0] for e in again._entries] == _commands(5)
    assert again.torn_bytes_cut == len(on_disk) - synced_end
    again.close()


def test_key_pair_survives_a_power_loss_after_it_is_made(lazy: LazyFS) -> None:
    """A key pair is the process's identity, admitted by its public key: a power loss just
    after it was made must not lose it (a restart would make another one, refused). The
    `keys` directory's own entry is made durable too, not only the files in it."""
    m = lazy.mount
    (m / "node").mkdir()
    fsync_path(m)  # the data dir itself is durable, as after a format
    pair = keys.create_keypair(m / "node" / "keys", "coordinator")
    lazy.power_loss()
    assert keys.load_keypair(m / "node" / "keys", "coordinator") == pair


def test_tserver_format_keeps_its_key_pair_through_a_power_loss(lazy: LazyFS) -> None:
    """`tserver fs format`, then the power goes: the root keeps its instance and its key pair
    (a formatted root without its pair gets a new key at its next start: another identity)."""
    fs = FsLayout.format(lazy.mount)  # the mount is the root, as a nemesis node's data dir
    public = fs.public_key()
    lazy.power_loss()
    assert FsLayout.read_instance(lazy.mount).uuid == fs.uuid
    assert FsLayout(lazy.mount, fs.uuid).public_key() == public


def test_tserver_format_of_a_new_directory_survives_a_power_loss(lazy: LazyFS) -> None:
    """`tserver fs format --fs-root` of a directory that does not exist yet makes it (and
    its missing parents): their entries must be durable too, or a power loss takes the
    whole formatted root."""
    fs = FsLayout.format(lazy.mount / "disk" / "ts")
    public = fs.public_key()
    lazy.power_loss()
    assert FsLayout.read_instance(lazy.mount / "disk" / "ts").uuid == fs.uuid
    assert FsLayout(lazy.mount / "disk" / "ts", fs.uuid).public_key() == public
