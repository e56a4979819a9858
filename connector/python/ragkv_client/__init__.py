"""ragkv_client: a thin Python client of the ragkv sidecar (proto ragkv.v1).

The message and stub modules are generated at build time from proto/ by
`/usr/bin/python3 -m grpc_tools.protoc` into <build>/python (package
`ragkv.v1`, plus `grpc.health.v1`). Put that directory on sys.path, or set
RAGKV_PY_STUBS to it, before importing this package.
"""
import os
import sys

_stubs = os.environ.get("RAGKV_PY_STUBS")
if _stubs and _stubs not in sys.path:
    sys.path.insert(0, _stubs)

from .client import Client, FusedKV, RagkvError  # noqa: E402,F401

__all__ = ["Client", "FusedKV", "RagkvError"]
