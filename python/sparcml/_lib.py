"""Loading libsparcml.so and declaring its functions for ctypes.

The library is found, in order, at $SPARCML_LIBRARY, inside the package
(a wheel built from python/ holds it), in the source tree
(build/lib/libsparcml.so after `make lib`), next to an installed copy of
this package (PREFIX/lib after `make install PREFIX=...`), and on the
system's library path (libsparcml.so.0). It is loaded on first use, so
`import sparcml` works without it.
"""

import ctypes
import os
import threading

# The ABI major version this package speaks (include/sparcml.h).
ABI_MAJOR = 0

_here = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None


class ErrorInfo(ctypes.Structure):
    """sparcml_error_info of include/sparcml.h."""

    _fields_ = [
        ("code", ctypes.c_int),
        ("rank", ctypes.c_int),
        ("peer", ctypes.c_int),
        ("seq", ctypes.c_uint64),
        ("op", ctypes.c_char_p),
        ("message", ctypes.c_char_p),
    ]


def candidates():
    """Where the library is looked for, in order."""
    paths = []
    env = os.environ.get("SPARCML_LIBRARY")
    if env:
        paths.append(env)
    paths.append(os.path.join(_here, "libsparcml.so"))  # built into the wheel (pip install ./python)
    paths.append(os.path.join(_here, "..", "..", "build", "lib", "libsparcml.so"))
    paths.append(os.path.join(_here, "..", "..", "..", "libsparcml.so.%d" % ABI_MAJOR))
    paths.append("libsparcml.so.%d" % ABI_MAJOR)
    return paths


def lib():
    """The loaded library, with every function's prototype declared."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            _lib = _declare(_load())
    return _lib


def _load():
    errors = []
    env = os.environ.get("SPARCML_LIBRARY")
    for path in candidates():
        if os.sep in path and not os.path.exists(path):
            if path == env:
                raise OSError("SPARCML_LIBRARY=%s: no such file" % env)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            if path == env:
                raise OSError("SPARCML_LIBRARY=%s: %s" % (env, e)) from e
            errors.append("%s: %s" % (path, e))
    raise OSError(
        "libsparcml not found: run `make lib` in the sparcml repository, or set "
        "SPARCML_LIBRARY to the path of libsparcml.so (tried: %s)" % "; ".join(errors or candidates()))


def _declare(so):
    c_int, c_size_t, c_void_p, c_char_p, c_double = (
        ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_double)
    u64 = ctypes.c_uint64
    pp = ctypes.POINTER(c_void_p)  # sparcml_comm **, sparcml_request **, sparcml_result **
    protos = {
        "sparcml_version": (c_int, [ctypes.POINTER(c_int), ctypes.POINTER(c_int)]),
        "sparcml_last_error": (c_char_p, []),
        "sparcml_last_error_info": (c_int, [ctypes.POINTER(ErrorInfo)]),
        "sparcml_status_name": (c_char_p, [c_int]),
        "sparcml_init": (c_int, [pp]),
        "sparcml_init_with": (c_int, [pp, c_int, c_int, c_char_p, c_char_p]),
        "sparcml_finalize": (c_int, [c_void_p]),
        "sparcml_abort": (c_int, [c_void_p, c_char_p]),
        "sparcml_rank": (c_int, [c_void_p]),
        "sparcml_size": (c_int, [c_void_p]),
        "sparcml_fail": (c_int, [c_void_p, c_char_p, c_char_p]),
        "sparcml_allreduce": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "sparcml_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "sparcml_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int]),
        "sparcml_allgatherv": (c_int, [c_void_p, c_void_p, c_size_t, c_void_p, c_void_p, c_int]),
        "sparcml_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int]),
        "sparcml_barrier": (c_int, [c_void_p]),
        "sparcml_sparse_allreduce": (c_int, [c_void_p, u64, c_size_t, c_void_p, c_void_p, c_int, c_void_p]),
        "sparcml_result_create": (c_int, [pp]),
        "sparcml_result_free": (None, [c_void_p]),
        "sparcml_sparse_allreduce_result": (c_int, [c_void_p, u64, c_size_t, c_void_p, c_void_p, c_int, c_void_p]),
        "sparcml_result_dim": (u64, [c_void_p]),
        "sparcml_result_is_dense": (c_int, [c_void_p]),
        "sparcml_result_nnz": (c_size_t, [c_void_p]),
        "sparcml_result_indices": (c_void_p, [c_void_p]),
        "sparcml_result_values": (c_void_p, [c_void_p]),
        "sparcml_result_dtype": (c_int, [c_void_p]),
        "sparcml_result_width": (c_size_t, [c_void_p]),
        "sparcml_sparse_allreduce_rows": (c_int, [c_void_p, u64, c_size_t, c_size_t, c_void_p, c_void_p, c_int, c_void_p]),
        "sparcml_start_sparse_allreduce_rows": (
            c_int, [c_void_p, u64, c_size_t, c_size_t, c_void_p, c_void_p, c_int, c_void_p, pp]),
        "sparcml_start_allreduce": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, pp]),
        "sparcml_start_reduce_scatter": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, pp]),
        "sparcml_start_allgather": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, pp]),
        "sparcml_start_allgatherv": (c_int, [c_void_p, c_void_p, c_size_t, c_void_p, c_void_p, c_int, pp]),
        "sparcml_start_broadcast": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, pp]),
        "sparcml_start_barrier": (c_int, [c_void_p, pp]),
        "sparcml_start_sparse_allreduce": (c_int, [c_void_p, u64, c_size_t, c_void_p, c_void_p, c_int, c_void_p, pp]),
        "sparcml_start_sparse_allreduce_result": (
            c_int, [c_void_p, u64, c_size_t, c_void_p, c_void_p, c_int, c_void_p, pp]),
        "sparcml_compressor_create": (c_int, [c_void_p, c_size_t, c_int, c_double, c_int, c_int, c_int, pp]),
        "sparcml_compressor_create_scoped": (
            c_int, [c_void_p, c_size_t, c_int, c_double, c_int, c_int, c_int, c_int, pp]),
        "sparcml_compressor_reduce": (c_int, [c_void_p, c_void_p, c_size_t]),
        "sparcml_compressor_residual": (c_int, [c_void_p, c_void_p, c_size_t]),
        "sparcml_compressor_destroy": (c_int, [c_void_p]),
        "sparcml_wait": (c_int, [pp, c_double]),
        "sparcml_compressor_start": (c_int, [c_void_p, c_void_p, c_size_t, pp]),
        "sparcml_start_send": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, pp]),
        "sparcml_start_recv": (c_int, [c_void_p, c_void_p, c_size_t, c_int, c_int, pp]),
        "sparcml_comm_split": (c_int, [c_void_p, c_int, c_int, pp]),
        "sparcml_set_timeout": (c_int, [c_void_p, c_double]),
        "sparcml_build_version": (c_char_p, []),
        "sparcml_test": (c_int, [pp, ctypes.POINTER(c_int)]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = restype, argtypes
    major, minor = c_int(), c_int()
    so.sparcml_version(ctypes.byref(major), ctypes.byref(minor))
    if major.value != ABI_MAJOR:
        raise OSError("libsparcml ABI %d.%d does not match this package's %d.x" % (
            major.value, minor.value, ABI_MAJOR))
    return so
