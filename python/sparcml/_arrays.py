"""Checking NumPy arrays before their memory is handed to the library.

Arrays are used in place (zero copy): only C-contiguous float32 or
float64 arrays in native byte order are accepted, and outputs must be
writable. Anything else is an error, never a silent copy, since a copy
would make an in-place allreduce write its result somewhere the caller
does not look.
"""

import numpy as np

DTYPES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}
NUMPY_DTYPE = {0: np.dtype(np.float32), 1: np.dtype(np.float64)}
OPS = {"sum": 0, "avg": 1, "mean": 1, "min": 2, "max": 3}


class Bad(Exception):
    """A local argument error, turned by the caller into a failure of the
    operation on every rank (sparcml_fail)."""


def buffer(a, name, writable):
    """The (address, element count, dtype code) of array a."""
    if not isinstance(a, np.ndarray):
        raise Bad("%s must be a NumPy array, not %s" % (name, type(a).__name__))
    code = DTYPES.get(a.dtype)
    if code is None:
        raise Bad("%s has dtype %s; sparcml reduces float32 and float64 (native byte order)" % (name, a.dtype))
    if not a.flags.c_contiguous:
        raise Bad("%s is not C-contiguous; sparcml works in place on contiguous memory "
                  "(pass np.ascontiguousarray(a) and use the result)" % name)
    if writable and not a.flags.writeable:
        raise Bad("%s is read-only" % name)
    return a.ctypes.data, a.size, code


def op_code(op):
    code = OPS.get(op) if isinstance(op, str) else None
    if code is None:
        raise Bad("unknown op %r (want 'sum', 'avg', 'min' or 'max')" % (op,))
    return code


def sparse(indices, values, dim):
    """Indices as sorted unique uint32 and values summed over repeated
    indices, as the library requires; contiguous arrays already in that
    form are used as they are, others are normalized into new arrays."""
    if not isinstance(indices, np.ndarray) or not isinstance(values, np.ndarray):
        raise Bad("indices and values must be NumPy arrays")
    if DTYPES.get(values.dtype) is None:
        raise Bad("values have dtype %s; sparcml reduces float32 and float64" % values.dtype)
    if indices.ndim != 1 or values.ndim != 1 or indices.shape != values.shape:
        raise Bad("indices %s and values %s must be 1-D and of one length" % (indices.shape, values.shape))
    if indices.dtype.kind not in "iu":
        raise Bad("indices have dtype %s; want integers" % indices.dtype)
    if not isinstance(dim, (int, np.integer)) or dim < 0 or dim > 1 << 32:
        raise Bad("dim %r must be an integer in [0, 2^32]" % (dim,))
    if indices.size and (indices.min() < 0 or indices.max() >= dim):
        raise Bad("an index is outside [0, dim=%d)" % dim)
    idx = np.ascontiguousarray(indices, dtype=np.uint32)
    val = np.ascontiguousarray(values)
    if idx.size > 1 and not (idx[1:] > idx[:-1]).all():
        idx, inverse = np.unique(idx, return_inverse=True)
        summed = np.zeros(idx.size, dtype=val.dtype)
        np.add.at(summed, inverse, val)
        val = summed
    return idx, val


def sparse_rows(rows, values, nrows):
    """Row indices as uint32 and values as a contiguous 2-D array, checked
    as the library requires them (sorted unique rows below nrows, one row
    of values per index); returns (rows, values, width)."""
    if not isinstance(rows, np.ndarray) or not isinstance(values, np.ndarray):
        raise Bad("rows and values must be NumPy arrays")
    if DTYPES.get(values.dtype) is None:
        raise Bad("values have dtype %s; sparcml reduces float32 and float64" % values.dtype)
    if rows.ndim != 1 or values.ndim != 2 or values.shape[0] != rows.size or values.shape[1] < 1:
        raise Bad("rows %s and values %s must be 1-D and (len(rows), width)" % (rows.shape, values.shape))
    if rows.dtype.kind not in "iu":
        raise Bad("rows have dtype %s; want integers" % rows.dtype)
    if not isinstance(nrows, (int, np.integer)) or nrows < 0 or nrows > 1 << 32:
        raise Bad("nrows %r must be an integer in [0, 2^32]" % (nrows,))
    if rows.size and (rows.min() < 0 or rows.max() >= nrows):
        raise Bad("a row is outside [0, nrows=%d)" % nrows)
    idx = np.ascontiguousarray(rows, dtype=np.uint32)
    if idx.size > 1 and not (idx[1:] > idx[:-1]).all():
        raise Bad("rows must be sorted and unique")
    return idx, np.ascontiguousarray(values), int(values.shape[1])


def nonzero_rows(values):
    """The mask of the rows of the 2-D array values that hold a nonzero
    value, or None when every row does. Only a row whose first value is
    zero is read in full: a full comparison of every value (torch's
    ne(0).any(dim=1)) is a pass over the whole result and most of the CPU
    an embedding gradient's all_reduce spends in Python
    (python/tools/sparse_bench.py)."""
    if values.shape[0] == 0 or values.shape[1] == 0:
        return None
    maybe = np.flatnonzero(values[:, 0] == 0)
    if maybe.size == 0:
        return None
    zero = maybe[~values[maybe].any(axis=1)]
    if zero.size == 0:
        return None
    keep = np.ones(values.shape[0], dtype=bool)
    keep[zero] = False
    return keep
