"""ragkv_client: a thin Python client of the ragkv sidecar (proto ragkv.v1).

Installed (`pip install ./connector/python`, offline: see pyproject.toml),
the generated `ragkv.v1` modules come with it. From a source tree, the
CMake build generates them into <build>/python: put that directory on
sys.path, or set RAGKV_PY_STUBS to it, before importing this package.
"""
import os
import sys

_stubs = os.environ.get("RAGKV_PY_STUBS")
if _stubs and _stubs not in sys.path:
    sys.path.insert(0, _stubs)

from .client import (Client, DataLoss, DeadlineExceeded, FailedPrecondition,  # noqa: E402
                     FusedKV, InvalidArgument, NotFound, OutOfRange, PermissionDenied,
                     RagkvError, ResourceExhausted, Unauthenticated, Unavailable)

__all__ = ["Client", "FusedKV", "RagkvError", "InvalidArgument", "NotFound", "PermissionDenied",
           "Unauthenticated", "ResourceExhausted", "FailedPrecondition", "Unavailable",
           "DeadlineExceeded", "OutOfRange", "DataLoss"]
