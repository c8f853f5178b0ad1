"""Imports the Python code generated from proto/gasloc/v1/*.proto.

The stubs are generated at build time into the build folder (target
gasloc_python_stubs: BUILD/python/gasloc/v1/*_pb2*.py), never committed.
They are found on sys.path (PYTHONPATH=BUILD/python), or in the folder named
by $GASLOC_PYTHON_STUBS, or in build/release/python of the checkout this
file lives in.
"""

import os
import sys


def _candidates():
    env = os.environ.get("GASLOC_PYTHON_STUBS")
    if env:
        yield env
    checkout = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))))
    yield os.path.join(checkout, "build", "release", "python")


def _import():
    try:
        from gasloc.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2
        return coordinator_pb2, coordinator_pb2_grpc, job_pb2
    except ImportError:
        pass
    for folder in _candidates():
        if os.path.isfile(os.path.join(folder, "gasloc", "v1", "coordinator_pb2.py")):
            sys.path.insert(0, folder)
            from gasloc.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2
            return coordinator_pb2, coordinator_pb2_grpc, job_pb2
    raise ImportError(
        "gasloc_client: the generated gasloc.v1 stubs were not found. Build "
        "them (cmake --build BUILD --target gasloc_python_stubs) and put "
        "BUILD/python on PYTHONPATH, or set GASLOC_PYTHON_STUBS=BUILD/python. "
        "They need Debian's python3-grpcio and python3-protobuf.")


coordinator_pb2, coordinator_pb2_grpc, job_pb2 = _import()
