"""The committed *_pb2 modules are exactly what the pinned protoc makes of the .proto files."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_generator():
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_modules_match_their_protos(tmp_path):
    gen = load_generator()
    made = gen.generate(tmp_path)
    assert made, "no .proto files found"
    stale = []
    for rel in made:
        committed = ROOT / rel
        if not committed.exists() or committed.read_bytes() != (tmp_path / rel).read_bytes():
            stale.append(str(rel))
    assert not stale, f"regenerate with `python scripts/gen_protos.py`: {stale}"


def test_every_generated_module_has_a_proto():
    gen = load_generator()
    protos = {p.relative_to(ROOT).with_suffix("") for p in gen.proto_files()}
    for package in gen.PACKAGES:
        for module in (ROOT / package).rglob("*_pb2.py"):
            stem = module.relative_to(ROOT).with_suffix("")
            assert Path(str(stem)[: -len("_pb2")]) in protos, f"{module} has no .proto"
