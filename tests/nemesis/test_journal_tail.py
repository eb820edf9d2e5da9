"""The logstore journal after a power loss that tore its last group commit past a hole.

A group commit is one write and one fdatasync. A write of more than 128 KiB reaches a FUSE
file system as several writes (and a real disk may write pages back in any order), so a
power loss before the fdatasync can leave the first pieces unwritten (a hole of zeros) and
a sector-aligned prefix of the last: valid records after a damaged one. None of that group
was acknowledged; everything before it was. The scan must cut that tail and keep the rest,
and still refuse damage followed by a later group commit (acknowledged data lost).

Real files in a temporary directory: the journal writes them, the test tears them as the
power loss would (tests/nemesis/test_power_fs.py does the same through lazyfs).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logstore.journal import HEADER_SIZE, DurableJournal
from rpc.errors import Corruption

SECTOR = 512
FUSE_WRITE = 128 * 1024


def _cmd(i: int) -> bytes:
    return (f"record {i:06d} ".encode()) * 50  # ~750 bytes


def _journal_with_two_groups(d: Path, first: int, second: int) -> tuple[int, bytes]:
    """A journal of `first` records synced in one group commit, then `second` records in
    a second one; returns the end of the first group and the whole file."""
    j = DurableJournal(str(d))
    for i in range(1, first + 1):
        j.add(_cmd(i), i, 1)
    assert j.sync()
    synced_end = os.path.getsize(d / "journal")
    for i in range(first + 1, first + second + 1):
        j.add(_cmd(i), i, 1)
    assert j.sync()
    j.close()
    return synced_end, (d / "journal").read_bytes()


def _tear(full: bytes, group_start: int) -> bytes:
    """The last group commit's write as a power loss leaves it: its first 128 KiB piece
    never written (zeros), the last piece cut at the largest sector boundary before its end."""
    last_piece = group_start + FUSE_WRITE
    assert len(full) > last_piece + 2 * SECTOR
    cut = (len(full) - 1) // SECTOR * SECTOR
    return full[:group_start] + bytes(last_piece - group_start) + full[last_piece:cut]


def test_torn_group_commit_past_a_hole_is_cut_and_synced_records_kept(tmp_path: Path) -> None:
    synced_end, full = _journal_with_two_groups(tmp_path, first=20, second=400)
    torn = _tear(full, synced_end)
    (tmp_path / "journal").write_bytes(torn)
    j = DurableJournal(str(tmp_path))  # the old scan raised Corruption here
    assert [e[1] for e in j[:]] == list(range(1, 21))
    assert [e[0] for e in j[:]] == [_cmd(i) for i in range(1, 21)]
    assert j.torn_bytes_cut == len(torn) - synced_end
    assert os.path.getsize(tmp_path / "journal") == synced_end
    # It goes on: new records after the cut survive a reopen.
    j.add(b"after the cut", 21, 2)
    assert j.sync()
    j.close()
    again = DurableJournal(str(tmp_path))
    assert again[-1] == (b"after the cut", 21, 2) and len(again) == 21
    again.close()


def test_hole_followed_by_a_later_group_commit_is_corruption(tmp_path: Path) -> None:
    """A zeroed stretch inside a group commit that a later one follows: that group was
    fdatasynced (the later write came after), so records acknowledged are gone: loud."""
    synced_end, full = _journal_with_two_groups(tmp_path, first=20, second=5)
    image = bytearray(full)
    start = HEADER_SIZE + 3 * SECTOR
    image[start : start + 4 * SECTOR] = bytes(4 * SECTOR)
    assert start + 4 * SECTOR < synced_end
    (tmp_path / "journal").write_bytes(bytes(image))
    with pytest.raises(Corruption, match="later group commit"):
        DurableJournal(str(tmp_path))


def test_flipped_byte_before_a_later_group_commit_is_corruption(tmp_path: Path) -> None:
    synced_end, full = _journal_with_two_groups(tmp_path, first=20, second=5)
    image = bytearray(full)
    image[synced_end - 100] ^= 0x01  # the last record of the first group
    (tmp_path / "journal").write_bytes(bytes(image))
    with pytest.raises(Corruption, match="later group commit"):
        DurableJournal(str(tmp_path))


def test_damage_without_a_hole_in_the_last_group_is_corruption(tmp_path: Path) -> None:
    """A flipped byte inside the last group commit with whole records after it is not what
    a power loss leaves (no unwritten sector between): still refused."""
    synced_end, full = _journal_with_two_groups(tmp_path, first=20, second=400)
    image = bytearray(full)
    image[synced_end + 5000] ^= 0x01
    (tmp_path / "journal").write_bytes(bytes(image))
    with pytest.raises(Corruption, match="a valid record follows"):
        DurableJournal(str(tmp_path))
