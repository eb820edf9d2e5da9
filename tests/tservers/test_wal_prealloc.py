"""WAL preallocation in steps (issue 28): an empty replica holds well under 1 MB of disk, a
segment grows as it fills, and the crash rules (zero tail, torn tail, read to the first hole,
appending to a crashed open segment) hold at and across every step."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rpc.protocols.tserver_pb2 import EntryType, LogEntryPB, RowBlockPB, WriteOpPB
from tests.tservers.helpers import create, open_manager
from tservers.wal import segment as seg
from tservers.wal.log import Appender, TabletLog, WalOptions
from tservers.wal.segment import WalCorruption

EMPTY_REPLICA_BYTES_MAX = 1 << 20


def _entry(i: int, size: int) -> LogEntryPB:
    return LogEntryPB(
        term=1,
        index=i,
        type=EntryType.WRITE,
        write=WriteOpPB(
            schema_version=1, blocks=[RowBlockPB(op=1, arrow_ipc=bytes([i % 251]) * size)]
        ),
    )


def _append(app: Appender, tl: TabletLog, i: int, size: int) -> None:
    done = threading.Event()
    errs: list = []
    app.append(tl, [_entry(i, size)], lambda err: (errs.append(err), done.set()))
    assert done.wait(30) and errs == [None]


def _disk_bytes(root: Path) -> int:
    """Blocks the file system gave every file under root (what du counts), not st_size."""
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            total += os.stat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def test_empty_replica_takes_less_than_a_megabyte_of_disk(tmp_path):
    """A replica created with the server's default segment size (16 MiB): its WAL, metadata
    and consensus metadata together stay below 1 MB (the whole segment used to be
    preallocated: 16.8 MB)."""
    root = tmp_path / "root"
    m = open_manager(root, segment_bytes=WalOptions().segment_size_bytes_max)
    try:
        before = _disk_bytes(root)
        for i in range(5):
            create(m, f"t{i}")
        per_replica = (_disk_bytes(root) - before) / 5
    finally:
        m.close()
    assert per_replica < EMPTY_REPLICA_BYTES_MAX, f"{per_replica:.0f} bytes per empty replica"
    wal_files = [p for p in root.rglob(f"{seg.SEGMENT_PREFIX}*") if p.is_file()]
    assert len(wal_files) == 5


def test_segment_grows_in_steps_and_reopens_after_a_crash_at_every_step(tmp_path):
    """Appends that fill a 16 MiB segment grow the file in steps (doubling from the smallest
    to the largest step, never past the segment size); a crash after any step leaves a
    segment that reopens with every acknowledged entry, read only up to its first hole."""
    opts = WalOptions(segment_size_bytes_max=16 << 20, sync=False)
    step_min, step_max = opts.preallocate_step_bytes_min, opts.preallocate_step_bytes_max
    wal = tmp_path / "wal"
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    path = wal / seg.segment_name(1)
    first = os.path.getsize(path)
    assert first <= step_min + 4096
    sizes = [first]
    size_entry = 60_000
    i = 0
    while tl.segment_count() == 1 and i < 400:
        i += 1
        _append(app, tl, i, size_entry)
        if tl.segment_count() == 1 and os.path.getsize(path) != sizes[-1]:
            sizes.append(os.path.getsize(path))
    app.close()
    steps = [b - a for a, b in zip(sizes, sizes[1:], strict=False)]
    assert len(sizes) >= 5, sizes
    assert all(s <= step_max + size_entry for s in steps), steps
    assert max(steps) >= step_max // 2, steps  # the steps grew
    assert sizes[-1] <= opts.segment_size_bytes_max
    assert tl.segment_count() == 2  # it rolled at the segment size
    os.close(tl.writer.fd)  # a crash: the second segment has no footer
    tl2, entries = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in entries] == list(range(1, i + 1))
    tl2.close()


@pytest.mark.parametrize("entries_n", [1, 5, 40, 200])
def test_crash_inside_a_step_keeps_the_zero_tail_rules(tmp_path, entries_n):
    """After a crash anywhere in the steps: the quick read (to the first hole) and the whole
    read agree, the file's size is the preallocated size (zeros after the data), appends go
    on in the crashed segment and grow it further, and stray bytes in the preallocated tail
    are still refused."""
    opts = WalOptions(segment_size_bytes_max=4 << 20)
    wal = tmp_path / "wal"
    app = Appender(opts)
    tl = TabletLog.create(wal, "t1", opts)
    for i in range(1, entries_n + 1):
        _append(app, tl, i, 3000)
    os.close(tl.writer.fd)  # a crash: no footer
    path = wal / seg.segment_name(1)
    quick = seg.read_segment(path, is_last=True)
    whole = seg.decode_segment(path, path.read_bytes(), is_last=True)
    assert quick.entries == whole.entries and quick.data_end == whole.data_end
    assert quick.size == os.path.getsize(path) < opts.segment_size_bytes_max
    assert quick.data_end <= quick.size

    tl, entries = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in entries] == list(range(1, entries_n + 1))
    for i in range(entries_n + 1, entries_n + 41):
        _append(app, tl, i, 3000)  # past the crashed file's size: it grows again
    os.close(tl.writer.fd)  # crash again
    tl, entries = TabletLog.open(wal, "t1", opts)
    assert [e.index for e in entries] == list(range(1, entries_n + 41))
    assert [s for s, _ in seg.list_segments(wal)] == [1]
    tl.close()
    app.close()
    c = seg.read_segment(path, is_last=False)
    assert c.footer is not None and c.footer.max_index == entries_n + 40

    # Stray data in the preallocated tail of a crashed segment is corruption, not a tail.
    wal2 = tmp_path / "wal2"
    app = Appender(opts)
    tl = TabletLog.create(wal2, "t1", opts)
    for i in range(1, entries_n + 1):
        _append(app, tl, i, 3000)
    app.close()
    os.close(tl.writer.fd)
    path2 = wal2 / seg.segment_name(1)
    size = os.path.getsize(path2)
    data_end = seg.read_segment(path2, is_last=True).data_end
    with open(path2, "r+b") as f:
        f.seek((data_end + size) // 2 + 64)
        f.write(b"stray bytes in the preallocated tail")
    with pytest.raises(WalCorruption, match="zero record header followed by data"):
        TabletLog.open(wal2, "t1", opts)
