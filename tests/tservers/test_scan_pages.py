"""A scan and a compaction hand the pages of the block chunks they have merged back to the
kernel (tservers/tablet/pages.py; issue 25: the tablet server's RSS while scanning): a full
scan of a tablet of four interleaved blocks (~48 MB of mapped files) leaves the process's
mapped-file RSS (RssFile) grown by far less than the blocks, every row returned; a
compaction likewise; and the release never touches memory outside a block's mapping."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

from rpc.protocols.tserver_pb2 import ColumnSchemaPB, DataType, OpType, SchemaPB
from tests.tservers.helpers import create, deadline, ipc, open_manager
from tservers.tablet.pages import Mapping, PageRelease, batch_span

SCHEMA = SchemaPB(
    columns=[
        ColumnSchemaPB(name="id", type=DataType.INT64, is_key=True),
        ColumnSchemaPB(name="s", type=DataType.STRING, nullable=True),
    ]
)
BLOCKS = 4
BLOCK_ROWS = 200_000
PAD = "x" * 48  # ~60 bytes a row: blocks of ~12 MB


def rss_file() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssFile")


def loaded(root: Path):
    """A tablet of BLOCKS flushed blocks of interleaved keys, reopened (nothing mapped in)."""
    m = open_manager(root, flush_rows=1 << 40)
    t = create(m, "t1", SCHEMA)
    for b in range(BLOCKS):
        ids = list(range(b, BLOCKS * BLOCK_ROWS, BLOCKS))
        for s in range(0, BLOCK_ROWS, 50_000):  # a write holds at most 100k rows
            part = ids[s : s + 50_000]
            rows = pa.table({"id": pa.array(part, pa.int64()), "s": [f"{i}{PAD}" for i in part]})
            t.write(1, [(OpType.INSERT, ipc(rows))], deadline(120))
        assert t.flush()
    m.close()
    m = open_manager(root, flush_rows=1 << 40)
    t = m.tablet("t1")
    assert t.wait_leader_ready(deadline(30))
    assert len(t.blocks) == BLOCKS
    return m, t


def test_a_full_scan_leaves_the_pages_of_the_blocks_it_merged(tmp_path):
    m, t = loaded(tmp_path / "root")
    try:
        block_bytes = sum(p.stat().st_size for p in m.fs.data_dir("t1").glob("block-*.arrow"))
        assert block_bytes > 40 << 20
        before = rss_file()
        _, pieces = t.scan_pieces([], [], [], [], 0)
        rows = peak = 0
        for p in pieces:
            rows += p.num_rows
            peak = max(peak, rss_file() - before)
        assert rows == BLOCKS * BLOCK_ROWS
        grown = rss_file() - before
        # Without the release the scan maps in every page of every block (~block_bytes).
        assert grown < block_bytes // 4, (grown, block_bytes)
        assert peak < block_bytes // 2, (peak, block_bytes)
        # Released pages read again (another scan) are mapped back from the page cache.
        assert t.scan([], [], [], [], 0).num_rows == BLOCKS * BLOCK_ROWS
    finally:
        m.close()


def test_a_compaction_leaves_the_pages_of_the_blocks_it_merged(tmp_path):
    m, t = loaded(tmp_path / "root")
    try:
        block_bytes = sum(p.stat().st_size for p in m.fs.data_dir("t1").glob("block-*.arrow"))
        before = rss_file()
        peak = 0
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, rss_file() - before)
                done.wait(0.005)

        sampler = threading.Thread(target=sample, name="rss-sampler")
        sampler.start()
        try:
            assert t.compact()
        finally:
            done.set()
            sampler.join(10)
        assert len(t.blocks) == 1
        # Without the release a compaction maps in every page of its inputs, and of its
        # output when it opens it (the filter and stats are read from it).
        assert peak < block_bytes // 2, (peak, block_bytes)
        assert t.scan([], [], [], [], 0).num_rows == BLOCKS * BLOCK_ROWS
    finally:
        m.close()


def test_the_release_never_advises_memory_outside_a_blocks_mapping():
    heap = pa.record_batch({"a": pa.array(range(100_000), pa.int64())})
    buf = heap.column(0).buffers()[1]
    # A mapping that does not hold the batch: no span, nothing released.
    elsewhere = Mapping(buf.address + buf.size + 4096, buf.address + buf.size + 8192)
    assert batch_span(heap, elsewhere) is None

    class Fake:
        mapping = elsewhere
        batches = [heap]
        spans = [batch_span(heap, elsewhere)]

    pr = PageRelease.of([(Fake(), None), None])
    pr([heap.num_rows])
    assert pr.released_bytes == 0
    assert heap.column(0).to_pylist() == list(range(100_000))  # not zeroed
