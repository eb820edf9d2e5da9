"""Small metadata files and the fs root: round trip, corruption detection, format rules."""

from __future__ import annotations

import pytest

from rpc.protocols.tserver_pb2 import ConsensusMetaPB, DataState, MemberType, SuperblockPB
from tservers import metafile
from tservers.fs import FsError, FsLayout
from tservers.metafile import MetaFileCorrupt


def _cmeta() -> ConsensusMetaPB:
    cm = ConsensusMetaPB(tablet_id="t1", current_term=7, voted_for="abc")
    cm.committed_config.opid_index = 3
    cm.committed_config.peers.add(uuid="abc", address="h:1", member_type=MemberType.VOTER)
    return cm


def test_round_trip(tmp_path):
    p = tmp_path / "cm"
    metafile.write_meta(p, metafile.MAGIC_CMETA, _cmeta())
    assert metafile.read_meta(p, metafile.MAGIC_CMETA, ConsensusMetaPB) == _cmeta()
    assert not (tmp_path / "cm.tmp").exists()


@pytest.mark.parametrize("where", ["magic", "version", "length", "crc", "payload"])
def test_every_corruption_is_detected(tmp_path, where):
    p = tmp_path / "cm"
    metafile.write_meta(p, metafile.MAGIC_CMETA, _cmeta())
    data = bytearray(p.read_bytes())
    offset = {"magic": 0, "version": 4, "length": 8, "crc": 12, "payload": 20}[where]
    data[offset] ^= 0x01
    p.write_bytes(bytes(data))
    with pytest.raises(MetaFileCorrupt) as e:
        metafile.read_meta(p, metafile.MAGIC_CMETA, ConsensusMetaPB)
    assert str(p) in str(e.value)


def test_truncated_and_wrong_kind(tmp_path):
    p = tmp_path / "cm"
    metafile.write_meta(p, metafile.MAGIC_CMETA, _cmeta())
    with pytest.raises(MetaFileCorrupt, match="bad magic"):
        metafile.read_meta(p, metafile.MAGIC_SUPERBLOCK, SuperblockPB)
    p.write_bytes(p.read_bytes()[:-3])
    with pytest.raises(MetaFileCorrupt, match="length"):
        metafile.read_meta(p, metafile.MAGIC_CMETA, ConsensusMetaPB)
    p.write_bytes(b"xx")
    with pytest.raises(MetaFileCorrupt, match="too short"):
        metafile.read_meta(p, metafile.MAGIC_CMETA, ConsensusMetaPB)


def test_format_refuses_non_empty_and_open_checks_instance(tmp_path):
    root = tmp_path / "root"
    fs = FsLayout.format(root)
    assert len(fs.uuid) == 32
    assert FsLayout.open(root).uuid == fs.uuid
    for sub in ("tablet-meta", "consensus-meta", "wals", "data", "quarantine"):
        assert (root / sub).is_dir()
    with pytest.raises(FsError, match="not empty"):
        FsLayout.format(root)
    other = tmp_path / "other"
    other.mkdir()
    (other / "junk").write_text("x")
    with pytest.raises(FsError, match="not empty"):
        FsLayout.format(other)
    with pytest.raises(FsError, match="not formatted"):
        FsLayout.open(tmp_path / "missing")
    data = bytearray((root / "instance").read_bytes())
    data[-1] ^= 0xFF
    (root / "instance").write_bytes(bytes(data))
    with pytest.raises(FsError, match="corrupt instance file"):
        FsLayout.open(root)


def test_superblock_and_cmeta_helpers(tmp_path):
    fs = FsLayout.format(tmp_path / "r", uuid="u1")
    sb = SuperblockPB(tablet_id="t1", data_state=DataState.READY, flushed_index=5)
    fs.write_superblock(sb)
    fs.write_cmeta(_cmeta())
    assert fs.read_superblock("t1") == sb
    assert fs.read_cmeta("t1") == _cmeta()
    assert fs.tablet_ids() == ["t1"]
    q1 = fs.new_quarantine_dir("t1")
    q2 = fs.new_quarantine_dir("t1")
    assert q1.name == "t1.1" and q2.name == "t1.2"
