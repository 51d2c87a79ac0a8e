"""sparcml for Python: dense and sparse collectives on NumPy arrays, over
the C ABI (libsparcml.so, loaded with ctypes; no package index needed).

    import numpy as np
    import sparcml

    comm = sparcml.init()                  # rank, size, rendezvous from the launcher
    grad = np.ones(1 << 20, dtype=np.float32)
    comm.allreduce(grad, op="avg")         # in place, zero-copy
    idx, val = comm.sparse_allreduce(np.array([comm.rank, 7]), np.ones(2, np.float32), dim=1000)
    req = comm.start_allreduce(grad)       # non-blocking
    req.wait(timeout=30)
    comp = sparcml.Compressor(comm, density=0.01)  # top-k with error feedback
    comp.reduce(grad)                      # in place: the average of what the ranks sent
    comm.finalize()

Run it with `sparcml run -n 4 -- /usr/bin/python3 train.py`, with
PYTHONPATH=python after `make lib` in the repository (or SPARCML_LIBRARY
set to the library's path). sparcml.torch holds PyTorch's DDP hooks.
"""

from ._comm import Comm, init
from ._compressor import Compressor
from ._request import Request
from .errors import (
    Aborted,
    Closed,
    Error,
    InitError,
    InternalError,
    InvalidArgument,
    Mismatch,
    NotDone,
    OutOfMemory,
    PeerLost,
    Timeout,
)

__all__ = [
    "init", "Comm", "Request", "Compressor", "library_version",
    "Error", "InvalidArgument", "Mismatch", "PeerLost", "Timeout", "Aborted", "Closed", "InitError",
    "NotDone", "OutOfMemory", "InternalError",
]


def __getattr__(name):
    # __version__ is the loaded library's build version
    # (sparcml_build_version: `git describe` of the source it was built
    # from, the Makefile's VERSION), read on first use so that importing
    # sparcml does not load the library.
    if name == "__version__":
        from ._lib import lib
        return lib().sparcml_build_version().decode()
    raise AttributeError("module 'sparcml' has no attribute %r" % name)


def library_version():
    """The (major, minor) ABI version of the loaded libsparcml."""
    import ctypes

    from ._lib import lib
    major, minor = ctypes.c_int(), ctypes.c_int()
    lib().sparcml_version(ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value
