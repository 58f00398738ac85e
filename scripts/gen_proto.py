"""Generate the Python stubs of ``proto/`` into ``rlmm/v1/`` (committed), or check they are current.

    python scripts/gen_proto.py           # regenerate
    python scripts/gen_proto.py --check   # exit 1 when the committed stubs differ from a fresh generation

The stubs come from grpcio-tools (its bundled protoc): ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py``
next to each other, importable as ``rlmm.v1.<name>_pb2`` because the proto package is ``rlmm.v1``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from importlib.resources import files
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out: Path) -> list[Path]:
    """Generate every stub under ``out``; returns the generated paths relative to ``out``."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = str(files("grpc_tools") / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {protos}")
    return sorted(p.relative_to(out) for p in out.rglob("*") if p.name.endswith(SUFFIXES))


def committed() -> list[Path]:
    package_dirs = {ROOT / p.parent for p in (x.relative_to(PROTO_ROOT) for x in PROTO_ROOT.rglob("*.proto"))}
    return sorted(
        p.relative_to(ROOT) for d in package_dirs if d.is_dir() for p in d.iterdir() if p.name.endswith(SUFFIXES)
    )


def check() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        stale = []
        for rel in sorted(set(fresh) | set(committed())):
            new, old = Path(tmp) / rel, ROOT / rel
            a = old.read_text().splitlines(keepends=True) if old.exists() else []
            b = new.read_text().splitlines(keepends=True) if new.exists() else []
            if a != b:
                stale.append(rel)
                sys.stdout.writelines(difflib.unified_diff(a, b, f"committed/{rel}", f"generated/{rel}", n=1))
    if stale:
        print(f"stale generated stubs: {', '.join(map(str, stale))}; run: python scripts/gen_proto.py")
        return 1
    print(f"generated stubs are current ({len(fresh)} files)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with a fresh generation, change nothing")
    if parser.parse_args().check:
        return check()
    for stale in committed():
        (ROOT / stale).unlink()
    with tempfile.TemporaryDirectory() as tmp:  # (generated apart: a listing of ROOT would take in .venv)
        for path in generate(Path(tmp)):
            (ROOT / path).write_bytes((Path(tmp) / path).read_bytes())
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
