"""Generates (on first use) and imports the toolgate gRPC stubs from the repository's protos.

Needs only `pip install grpcio grpcio-tools`. The stubs go to examples/python/generated/.
"""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
GENERATED = HERE / "generated"
PROTOS = ["toolgate.proto", "hooks.proto", "worker.proto"]


def load():
    """Returns (toolgate_pb2, toolgate_pb2_grpc), generating them if the protos changed."""
    generate()
    from toolgate.v1 import toolgate_pb2, toolgate_pb2_grpc

    return toolgate_pb2, toolgate_pb2_grpc


def load_worker():
    """Returns (worker_pb2, worker_pb2_grpc, toolgate_pb2) for serving ToolWorker."""
    generate()
    from toolgate.v1 import toolgate_pb2, worker_pb2, worker_pb2_grpc

    return worker_pb2, worker_pb2_grpc, toolgate_pb2


def generate():
    """Generates the stubs into examples/python/generated/ if the protos changed.

    Stubs shipped without the protos (the worker's container image, deploy/worker.Dockerfile)
    are used as they are.
    """
    sources = [PROTO_ROOT / "toolgate" / "v1" / name for name in PROTOS]
    target = GENERATED / "toolgate" / "v1" / "toolgate_pb2.py"
    if not target.exists():
        stale = True
    elif not PROTO_ROOT.exists():
        stale = False
    else:
        stale = target.stat().st_mtime < max(p.stat().st_mtime for p in sources)
    if stale:
        import grpc_tools
        from grpc_tools import protoc

        GENERATED.mkdir(parents=True, exist_ok=True)
        well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
        code = protoc.main([
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={GENERATED}",
            f"--grpc_python_out={GENERATED}",
            *map(str, sources),
        ])
        if code != 0:
            sys.exit(f"protoc failed with exit code {code}")
    if str(GENERATED) not in sys.path:
        sys.path.insert(0, str(GENERATED))
