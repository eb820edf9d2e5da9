"""Filters in their files' pages, not the heap (design/storage.md, "Session 27"): a block's
version-2 filter is read through a mapping of its file, so its 1.5 bytes a key count in
RssFile under the mapped-pages budget (`--mapped-bytes-max`) instead of growing the heap
with the tablet (75 MB at 50M rows); a trim hands its pages back and probes answer the
same from the page cache. Version-1 files are still read (into the heap), and a torn or
missing filter file is rebuilt and mapped."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from rpc.protocols.tserver_pb2 import OpType
from tests.tservers.helpers import create, deadline, ipc, open_manager, six_rows
from tests.tservers.test_mapped_budget import _blocks_rss
from tservers.tablet.blockindex import BlockIndex, bloom_name, write_file
from tservers.tablet.bloom import Bloom, BloomV1, Probe, hash_columns
from tservers.tablet.pages import release_blocks

ROWS = 300_000
MIB = 1 << 20


def _tablet(tmp_path):
    m = open_manager(tmp_path / "root", flush_rows=10_000_000)
    t = create(m, "t")
    for s in range(0, ROWS, 50_000):
        t.write(
            1, [(OpType.INSERT, ipc(six_rows(range(0, 2 * ROWS, 2)[s : s + 50_000])))], deadline(30)
        )
    t.flush()
    return m, t


def _filter_rss(t) -> int:
    """Resident bytes of this process's mappings of the tablet's filter files."""
    return sum(_blocks_rss(t.fs.data_dir(t.tablet_id) / bloom_name(b.name)) for b in t.blocks)


def _probe(b: BlockIndex, keys: list[int]) -> list[bool]:
    h = hash_columns([pa.array(keys, pa.int64())])
    return b.bloom.may_contain_many(Probe(h)).to_pylist()


def test_a_blocks_filter_is_its_files_pages(tmp_path):
    m, t = _tablet(tmp_path)
    try:
        (b,) = t.blocks
        assert isinstance(b.bloom, Bloom) and b.filter_mapping is not None
        fm = b.filter_mapping
        words = b.bloom._words.buffers()[1]
        assert fm.lo <= words.address and words.address + words.size <= fm.hi  # no copy
        assert b.filter_mapping in b.mappings and b.mapping in b.mappings
        present = list(range(0, 2 * ROWS, 2))
        assert all(_probe(b, present))  # no false negative
        absent = [k * 2 + 1 for k in random.Random(1).sample(range(ROWS), 20_000)]
        before = _probe(b, absent)
        assert sum(before) < 0.03 * len(absent)
        assert all(
            b.bloom.may_contain(h) for h in hash_columns([pa.array(present[:500])]).to_pylist()
        )
        # The probes touched the filter's pages; a trim hands them back, the probes answer
        # the same from the page cache.
        assert _filter_rss(t) >= 64 * 1024
        release_blocks(list(t.blocks))
        assert _filter_rss(t) == 0
        assert _probe(b, absent) == before and all(_probe(b, present[:5000]))
        # Existence checks through the tablet still refuse a present key.
        got = t.scan([], [], [], [], 0)
        assert got.num_rows == ROWS
    finally:
        m.close()


@pytest.fixture
def one_block(tmp_path):
    """(the tablet, its one block, its data directory)."""
    m, t = _tablet(tmp_path)
    try:
        (b,) = t.blocks
        yield t, b, t.fs.data_dir(t.tablet_id)
    finally:
        m.close()


def test_a_version_1_filter_file_is_read_into_the_heap(one_block):
    t, b, data_dir = one_block
    v1 = BloomV1.build_batches((hash_columns(a) for a in b._keys), b.num_rows)
    # Replaced (a new inode) as the server writes files: b keeps mapping the old one.
    write_file(data_dir / bloom_name(b.name), v1.to_bytes())
    again = BlockIndex.open(data_dir, b.name, t._key_names())
    assert isinstance(again.bloom, BloomV1) and again.filter_mapping is None
    assert again.mappings == [again.mapping]
    assert all(_probe(again, list(range(0, 2000, 2))))


def test_a_torn_filter_file_is_rebuilt_and_mapped(one_block):
    t, b, data_dir = one_block
    path = data_dir / bloom_name(b.name)
    whole = path.read_bytes()
    write_file(path, whole[: len(whole) // 2])  # torn (a new inode: b maps the old)
    again = BlockIndex.open(data_dir, b.name, t._key_names())
    assert isinstance(again.bloom, Bloom) and again.filter_mapping is not None
    assert path.read_bytes() == whole  # rebuilt as it was
    path.unlink()  # missing
    again = BlockIndex.open(data_dir, b.name, t._key_names())
    assert again.filter_mapping is not None and path.read_bytes() == whole
    assert all(_probe(again, list(range(0, 2 * ROWS, 2))[:5000]))
