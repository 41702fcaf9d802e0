"""Regenerate the Python modules for every .proto under protos/ with the pinned grpcio-tools.

Run from anywhere: `python -m protos.generate`. Paths in imports are relative to the repository root
(`import "protos/rlds_creator/study.proto"`), so generated modules import as `protos.<pkg>.<name>_pb2`.
A test regenerates into a temporary folder and compares, so a stale module fails CI.
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = REPO_ROOT / "protos"


def proto_files() -> list[Path]:
    return sorted(PROTO_DIR.rglob("*.proto"))


def generate(out_dir: Path = REPO_ROOT) -> list[Path]:
    """Compile every proto into `out_dir` (mirroring protos/...), returning the generated files."""
    from grpc_tools import protoc

    well_known = str(resources.files("grpc_tools") / "_proto")
    files = [str(p.relative_to(REPO_ROOT)) for p in proto_files()]
    args = ["protoc", f"-I{REPO_ROOT}", f"-I{well_known}", f"--python_out={out_dir}", f"--pyi_out={out_dir}", *files]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}: {' '.join(args)}")
    out = []
    for f in files:
        stem = Path(f).with_suffix("")
        out += [out_dir / f"{stem}_pb2.py", out_dir / f"{stem}_pb2.pyi"]
    return out


def main() -> int:
    for path in generate():
        print(path.relative_to(REPO_ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
