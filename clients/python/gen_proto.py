#!/usr/bin/env python3
"""Regenerates the committed protobuf stubs (src/toolgate/_proto/) from the repository's proto/.

usage: python gen_proto.py [--check]

Needs grpcio-tools (the version pinned in scripts/requirements-test.txt: its protoc decides the
generated text). With --check it writes nothing and exits 1 when the committed stubs differ from
what proto/ generates now; the package's tests run that check.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
PROTO = "toolgate/v1/toolgate.proto"
TARGET = HERE / "src" / "toolgate" / "_proto"
FILES = ["toolgate_pb2.py", "toolgate_pb2.pyi"]


def generate(out: pathlib.Path) -> dict[str, bytes]:
    """The stubs protoc makes from proto/, by file name."""
    import grpc_tools  # type: ignore[import-untyped]
    from grpc_tools import protoc

    # protoc.main does not add grpc_tools' own copy of the well-known types.
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    code = protoc.main(
        ["protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out}", f"--pyi_out={out}",
         str(PROTO_ROOT / PROTO)]
    )
    if code != 0:
        raise SystemExit(f"protoc failed ({code})")
    made = out / "toolgate" / "v1"
    return {name: (made / name).read_bytes() for name in FILES}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(pathlib.Path(tmp))
    if args.check:
        stale = [n for n in FILES
                 if not (TARGET / n).exists() or (TARGET / n).read_bytes() != fresh[n]]
        if stale:
            print(f"stale stubs: {', '.join(stale)}; run python clients/python/gen_proto.py",
                  file=sys.stderr)
            return 1
        return 0
    for name, text in fresh.items():
        (TARGET / name).write_bytes(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
