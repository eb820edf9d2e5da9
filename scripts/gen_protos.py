"""Generate the Python modules of every .proto file in the project's packages.

Each package owns its .proto files (rpc/, logstore/, coordinator/, tservers/); the generated
`*_pb2.py` modules are committed beside them. The protoc used is the one bundled with the
pinned grpcio-tools (see pyproject.toml), and tests/test_protos.py fails when regenerating
would change any committed module.

    python scripts/gen_protos.py            # regenerate in place
    python scripts/gen_protos.py --out DIR  # generate into DIR (used by the test)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rpc", "logstore", "coordinator", "tservers")


def proto_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for package in PACKAGES:
        files.extend(sorted((root / package).rglob("*.proto")))
    return files


def generate(out_dir: Path, root: Path = ROOT) -> list[Path]:
    """Run protoc over every project .proto; returns the generated files (relative paths)."""
    from grpc_tools import protoc  # only needed by developers and the test suite

    files = proto_files(root)
    if not files:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{root}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *(str(f.relative_to(root)) for f in files),
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with status {rc}")
    made = []
    for f in files:
        stem = f.relative_to(root).with_suffix("")
        made += [Path(f"{stem}_pb2.py"), Path(f"{stem}_pb2.pyi")]
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="output root (default: in place)")
    args = parser.parse_args(argv)
    for path in generate(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
