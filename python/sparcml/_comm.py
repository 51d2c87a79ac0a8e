"""The communicator: sparcml's collectives on NumPy arrays."""

import atexit
import ctypes
import sys
import threading
import weakref

import numpy as np

from . import errors
from ._arrays import DTYPES, NUMPY_DTYPE, Bad, buffer, op_code, sparse, sparse_rows
from ._lib import lib
from ._request import Request

_live = weakref.WeakSet()
_init_lock = threading.Lock()
_from_env = None  # a weak reference to the communicator init() made from the environment


@atexit.register
def _finalize_at_exit():
    # Finalize is collective and bounded: it waits (at most 30 s, or the
    # default timeout) for every rank to get there, so that this rank's
    # last messages are delivered before its connections close. A process
    # dying of an uncaught exception aborts instead, so that the other
    # ranks, which may be waiting for it inside a collective, fail at once
    # naming it rather than wait for their deadline.
    crashed = getattr(sys, "last_value", None)
    for comm in list(_live):
        try:
            if crashed is not None and not isinstance(crashed, SystemExit) and comm._h:
                comm.abort("%s: %s" % (type(crashed).__name__, crashed))
            comm.finalize()
        except errors.Error:
            pass


def init(rank=None, size=None, addr=None, token=None):
    """Joins the job this process belongs to and returns its communicator.

    With no arguments rank, size, rendezvous address and token come from the
    launcher's environment (sparcml run, torchrun, mpirun, srun); any
    argument given overrides it (addr is "host:port" of rank 0's store).
    Collective: returns once every rank has joined. Raises InitError.

    The environment describes one membership of one job: while the
    communicator made from it (with no arguments) is not finalized, init()
    without arguments returns that same communicator (so that, for example,
    sparcml.torch's hooks and the application share it)."""
    global _from_env
    so = lib()
    handle = ctypes.c_void_p()
    if rank is None and size is None and addr is None and token is None:
        with _init_lock:
            comm = _from_env() if _from_env is not None else None
            if comm is not None and comm._h:
                return comm
            rc = so.sparcml_init(ctypes.byref(handle))
            if rc:
                raise errors.from_last_error(so, rc)
            comm = Comm(handle)
            _from_env = weakref.ref(comm)
            return comm
    else:
        rc = so.sparcml_init_with(
            ctypes.byref(handle), -1 if rank is None else int(rank), -1 if size is None else int(size),
            None if addr is None else str(addr).encode(), None if token is None else str(token).encode())
    if rc:
        raise errors.from_last_error(so, rc)
    return Comm(handle)


class Comm:
    """One rank's handle on the job: collectives on NumPy arrays, in place
    and zero-copy for C-contiguous float32 and float64 arrays.

    Collectives must be called in the same order on every rank. A call whose
    arguments are bad on one rank (wrong dtype, non-contiguous or read-only
    array) raises InvalidArgument there and fails the same call on every
    other rank at once (Aborted, naming the rank), instead of leaving them
    waiting. As a context manager, the communicator is finalized on exit,
    and aborted first if the block raised, so the other ranks fail at once
    rather than wait for this one."""

    def __init__(self, handle):
        so = lib()
        self._so = so
        self._h = handle
        self.rank = so.sparcml_rank(handle)
        self.size = so.sparcml_size(handle)
        self._results = []  # reusable sparcml_result handles
        self._compressors = weakref.WeakSet()  # closed at finalize, before the communicator
        _live.add(self)

    # ---- plumbing ----

    def _handle(self, op):
        if not self._h:
            raise errors.Closed("sparcml: rank %d: %s: the communicator is finalized" % (self.rank, op),
                                self.rank, -1, op, 0)
        return self._h

    def _raise(self, rc):
        raise errors.from_last_error(self._so, rc)

    def _bad(self, op, err):
        """Fails op on every rank with err's text and raises it here."""
        rc = self._so.sparcml_fail(self._handle(op), op.encode(), str(err).encode())
        raise errors.from_last_error(self._so, rc) from None

    def _start(self, fn, args, op, arrays, value=None, collect=None, release=None):
        req = ctypes.c_void_p()
        rc = fn(*args, ctypes.byref(req))
        if rc:
            if release is not None:
                release()
            self._raise(rc)
        return Request(req, op, arrays, value, collect, release)

    # ---- life cycle ----

    def finalize(self):
        """Releases the communicator. Collective, like MPI_Finalize: waits
        (bounded) until every rank gets here. Idempotent."""
        h, self._h = self._h, None
        if not h:
            return
        _live.discard(self)
        for comp in list(self._compressors):
            comp.close()
        for res in self._results:
            self._so.sparcml_result_free(res)
        self._results = []
        rc = self._so.sparcml_finalize(h)
        if rc:
            self._raise(rc)

    close = finalize

    def abort(self, reason=None):
        """Fails every pending and later operation here and on every peer
        (naming this rank). finalize() must still be called."""
        rc = self._so.sparcml_abort(self._handle("abort"), None if reason is None else str(reason).encode())
        if rc:
            self._raise(rc)

    def fail(self, op, reason):
        """Fails the next collective on every rank with reason, without
        running it (for checks the application makes itself); raises
        InvalidArgument here."""
        self._bad(str(op), reason)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc is not None and self._h:
            self.abort("%s: %s" % (exc_type.__name__, exc))
        self.finalize()
        return False

    def __repr__(self):
        return "<sparcml.Comm rank %d of %d%s>" % (self.rank, self.size, "" if self._h else ", finalized")

    # ---- dense collectives ----

    def allreduce(self, array, op="sum"):
        """Reduces array element-wise across ranks with op ("sum", "avg",
        "min", "max"), in place; returns array."""
        try:
            ptr, n, dt = buffer(array, "array", True)
            code = op_code(op)
        except Bad as e:
            self._bad("allreduce", e)
        rc = self._so.sparcml_allreduce(self._handle("allreduce"), ptr, n, dt, code)
        if rc:
            self._raise(rc)
        return array

    def start_allreduce(self, array, op="sum"):
        """Starts allreduce(array, op); returns a Request whose wait()
        returns array. array must not be touched until then."""
        try:
            ptr, n, dt = buffer(array, "array", True)
            code = op_code(op)
        except Bad as e:
            self._bad("allreduce", e)
        return self._start(self._so.sparcml_start_allreduce, (self._handle("allreduce"), ptr, n, dt, code),
                           "allreduce", (array,), value=array)

    def _reduce_scatter_args(self, send, recv, op):
        try:
            sp, n, dt = buffer(send, "send", False)
            if n % self.size:
                raise Bad("send has %d elements, not a multiple of the %d ranks" % (n, self.size))
            if recv is None:
                recv = np.empty(n // self.size, dtype=send.dtype)
            rp, m, rdt = buffer(recv, "recv", True)
            if rdt != dt or m * self.size != n:
                raise Bad("recv (%d %s) must hold send's %d elements / %d ranks, of its dtype" % (
                    m, recv.dtype, n, self.size))
            code = op_code(op)
        except Bad as e:
            self._bad("reduce-scatter", e)
        return (self._handle("reduce-scatter"), sp, rp, m, dt, code), recv

    def reduce_scatter(self, send, recv=None, op="sum"):
        """Reduces send (size blocks) across ranks and returns block rank of
        the result, in recv (allocated if None)."""
        args, recv = self._reduce_scatter_args(send, recv, op)
        rc = self._so.sparcml_reduce_scatter(*args)
        if rc:
            self._raise(rc)
        return recv

    def start_reduce_scatter(self, send, recv=None, op="sum"):
        args, recv = self._reduce_scatter_args(send, recv, op)
        return self._start(self._so.sparcml_start_reduce_scatter, args, "reduce-scatter", (send, recv), value=recv)

    def _allgather_args(self, send, recv, counts):
        op = "allgather" if counts is None else "allgatherv"
        try:
            sp, n, dt = buffer(send, "send", False)
            c = None
            if counts is None:
                total = n * self.size
            else:
                c = np.ascontiguousarray(counts, dtype=np.uintp)
                if c.shape != (self.size,):
                    raise Bad("counts must have one entry per rank (%d), not shape %s" % (self.size, c.shape))
                if c[self.rank] != n:
                    raise Bad("send has %d elements but counts[%d] is %d" % (n, self.rank, c[self.rank]))
                total = int(c.sum())
            if recv is None:
                recv = np.empty(total, dtype=send.dtype)
            rp, m, rdt = buffer(recv, "recv", True)
            if rdt != dt or m != total:
                raise Bad("recv (%d %s) must hold %d elements of send's dtype" % (m, recv.dtype, total))
        except Bad as e:
            self._bad(op, e)
        h = self._handle(op)
        if c is None:
            return op, (h, sp, rp, n, dt), recv, None
        return op, (h, sp, n, rp, c.ctypes.data, dt), recv, c

    def allgather(self, send, recv=None):
        """Concatenates every rank's send (all of one length) in rank order,
        into recv (allocated if None), which it returns."""
        _, args, recv, _ = self._allgather_args(send, recv, None)
        rc = self._so.sparcml_allgather(*args)
        if rc:
            self._raise(rc)
        return recv

    def allgatherv(self, send, counts, recv=None):
        """allgather where rank r brings counts[r] elements (counts the same
        on every rank)."""
        _, args, recv, _ = self._allgather_args(send, recv, counts)
        rc = self._so.sparcml_allgatherv(*args)
        if rc:
            self._raise(rc)
        return recv

    def start_allgather(self, send, recv=None, counts=None):
        op, args, recv, c = self._allgather_args(send, recv, counts)
        fn = self._so.sparcml_start_allgather if c is None else self._so.sparcml_start_allgatherv
        return self._start(fn, args, op, (send, recv, c), value=recv)

    def broadcast(self, array, root=0):
        """Copies root's array into every other rank's array, in place."""
        try:
            ptr, n, dt = buffer(array, "array", True)
        except Bad as e:
            self._bad("broadcast", e)
        rc = self._so.sparcml_broadcast(self._handle("broadcast"), ptr, n, dt, int(root))
        if rc:
            self._raise(rc)
        return array

    def start_broadcast(self, array, root=0):
        try:
            ptr, n, dt = buffer(array, "array", True)
        except Bad as e:
            self._bad("broadcast", e)
        return self._start(self._so.sparcml_start_broadcast, (self._handle("broadcast"), ptr, n, dt, int(root)),
                           "broadcast", (array,), value=array)

    # ---- point to point, sub-communicators, deadlines ----

    def _p2p(self, op, fn, array, peer):
        try:
            ptr, n, dt = buffer(array, "array", op == "recv")
            peer = int(peer)
        except (Bad, TypeError, ValueError) as e:
            raise errors.InvalidArgument("sparcml: rank %d: %s: %s" % (self.rank, op, e), self.rank, -1, op, 0) from None
        return self._start(fn, (self._handle(op), ptr, n, dt, peer), op, (array,), value=array)

    def start_send(self, array, peer):
        """Starts sending array to rank peer, which calls start_recv with an
        array of the same length and dtype; returns a Request. Messages
        between two ranks match in the order they were started."""
        return self._p2p("send", self._so.sparcml_start_send, array, peer)

    def start_recv(self, array, peer):
        """Starts receiving into array what rank peer sends; returns a
        Request whose wait() returns array."""
        return self._p2p("recv", self._so.sparcml_start_recv, array, peer)

    def split(self, color, key=0):
        """Collective over this communicator: the ranks passing the same
        color form a new Comm, ranked by key then by rank here; None on a
        rank passing a negative color. Finalize it before this one."""
        h = ctypes.c_void_p()
        rc = self._so.sparcml_comm_split(self._handle("split"), int(color), int(key), ctypes.byref(h))
        if rc:
            self._raise(rc)
        return Comm(h) if h.value else None

    def set_timeout(self, seconds):
        """The deadline of every operation started from now on, in seconds
        after its start; None or <= 0 for the library's default
        (SPARCML_TIMEOUT). Local."""
        rc = self._so.sparcml_set_timeout(self._handle("set-timeout"), 0.0 if seconds is None else float(seconds))
        if rc:
            self._raise(rc)

    def barrier(self):
        """Returns once every rank has entered the barrier."""
        rc = self._so.sparcml_barrier(self._handle("barrier"))
        if rc:
            self._raise(rc)

    def start_barrier(self):
        return self._start(self._so.sparcml_start_barrier, (self._handle("barrier"),), "barrier", ())

    # ---- sparse allreduce ----

    def sparse_allreduce(self, indices, values, dim, out=None, dense=False):
        """Sums every rank's sparse vector of dimension dim: this rank's
        entries are indices (any integer dtype, below dim) and values
        (float32 or float64, one per index). Each rank may bring a different
        number of entries. Indices need not be sorted: repeated ones are
        summed (in a copy; sorted unique uint32 indices are used in place).

        Returns (indices, values) of the sum, indices sorted uint32: the
        union of the ranks' indices, or every index of [0, dim) when the
        library produced the sum dense (when that is smaller, or when its
        cost model chose the dense allreduce). With dense=True, or an out array
        of dim elements of values' dtype, returns the dense sum instead,
        written into out (allocated if None)."""
        return self._sparse(indices, values, dim, out, dense, start=False)

    def start_sparse_allreduce(self, indices, values, dim, out=None, dense=False):
        """Starts sparse_allreduce; the Request's wait() returns its result."""
        return self._sparse(indices, values, dim, out, dense, start=True)

    def _sparse(self, indices, values, dim, out, want_dense, start):
        op = "sparse-allreduce"
        try:
            idx, val = sparse(indices, values, dim)
            dt = DTYPES[val.dtype]
            if out is not None or want_dense:
                if out is None:
                    out = np.empty(int(dim), dtype=val.dtype)
                op_ptr, m, odt = buffer(out, "out", True)
                if odt != dt or m != dim:
                    raise Bad("out (%d %s) must hold dim=%d elements of values' dtype" % (m, out.dtype, dim))
        except Bad as e:
            self._bad(op, e)
        h, so, n = self._handle(op), self._so, idx.size
        if out is not None:
            args = (h, int(dim), n, idx.ctypes.data, val.ctypes.data, dt, op_ptr)
            if start:
                return self._start(so.sparcml_start_sparse_allreduce, args, op, (idx, val, out), value=out)
            rc = so.sparcml_sparse_allreduce(*args)
            if rc:
                self._raise(rc)
            return out
        res = self._results.pop() if self._results else self._new_result()
        args = (h, int(dim), n, idx.ctypes.data, val.ctypes.data, dt, res)
        if start:
            return self._start(so.sparcml_start_sparse_allreduce_result, args, op, (idx, val),
                               collect=lambda: self._read_result(res),
                               release=lambda: self._results.append(res))
        try:
            rc = so.sparcml_sparse_allreduce_result(*args)
            if rc:
                self._raise(rc)
            return self._read_result(res)
        finally:
            self._results.append(res)

    def sparse_allreduce_rows(self, rows, values, nrows):
        """Sums every rank's row-sparse matrix of nrows rows (an embedding
        gradient): this rank's rows are rows (sorted unique integers below
        nrows) and values, a 2-D float32 or float64 array of one row of
        width values per index. A row travels as one index and its width
        values. Each rank may bring a different number of rows, 0 included.

        Returns (rows, values) of the sum: rows sorted uint32, values of
        shape (len(rows), width). Every row some rank passed is there,
        except that a range the library carried dense gives back only its
        rows holding a nonzero value; no untouched row is ever present."""
        return self._rows(rows, values, nrows, start=False)

    def start_sparse_allreduce_rows(self, rows, values, nrows, borrow=False):
        """Starts sparse_allreduce_rows; the Request's wait() returns its result.
        With borrow, wait() returns (rows, values, done) instead: views of
        the library's result memory, no copy, valid until done() is called,
        which the caller must do once it has copied what it keeps."""
        return self._rows(rows, values, nrows, start=True, borrow=borrow)

    def _rows(self, rows, values, nrows, start, borrow=False):
        op = "sparse-allreduce"
        try:
            idx, val, width = sparse_rows(rows, values, nrows)
            dt = DTYPES[val.dtype]
        except Bad as e:
            self._bad(op, e)
        h, so, n = self._handle(op), self._so, idx.size
        res = self._results.pop() if self._results else self._new_result()
        args = (h, int(nrows), width, n, idx.ctypes.data, val.ctypes.data, dt, res)
        if start and borrow:
            lent = []

            def collect():
                rows, values = self._view_rows(res)
                lent.append(res)
                return rows, values, lambda: self._results.append(res)

            return self._start(so.sparcml_start_sparse_allreduce_rows, args, op, (idx, val), collect=collect,
                               release=lambda: None if lent else self._results.append(res))
        if start:
            return self._start(so.sparcml_start_sparse_allreduce_rows, args, op, (idx, val),
                               collect=lambda: self._read_rows(res),
                               release=lambda: self._results.append(res))
        try:
            rc = so.sparcml_sparse_allreduce_rows(*args)
            if rc:
                self._raise(rc)
            return self._read_rows(res)
        finally:
            self._results.append(res)

    def _read_rows(self, res):
        """The rows of a filled row-sparse sparcml_result, as (rows, values)."""
        so = self._so
        nnz, width = so.sparcml_result_nnz(res), so.sparcml_result_width(res)
        dtype = NUMPY_DTYPE[so.sparcml_result_dtype(res)]
        values = np.empty((nnz, width), dtype=dtype)
        indices = np.empty(nnz, dtype=np.uint32)
        if nnz:
            ctypes.memmove(values.ctypes.data, so.sparcml_result_values(res), values.nbytes)
            ctypes.memmove(indices.ctypes.data, so.sparcml_result_indices(res), nnz * 4)
        return indices, values

    def _view_rows(self, res):
        """The rows of a filled row-sparse sparcml_result, as (rows, values)
        arrays over the result's own memory: valid while res is not
        reused."""
        so = self._so
        nnz, width = so.sparcml_result_nnz(res), so.sparcml_result_width(res)
        dtype = NUMPY_DTYPE[so.sparcml_result_dtype(res)]
        if not nnz:
            return np.empty(0, dtype=np.uint32), np.empty((0, width), dtype=dtype)
        ctype = ctypes.c_float if dtype == np.float32 else ctypes.c_double
        values = (ctype * (nnz * width)).from_address(so.sparcml_result_values(res))
        indices = (ctypes.c_uint32 * nnz).from_address(so.sparcml_result_indices(res))
        return np.ctypeslib.as_array(indices), np.ctypeslib.as_array(values).reshape(nnz, width)

    def _new_result(self):
        res = ctypes.c_void_p()
        rc = self._so.sparcml_result_create(ctypes.byref(res))
        if rc:
            self._raise(rc)
        return res

    def _read_result(self, res):
        """Copies a filled sparcml_result into new NumPy arrays."""
        so = self._so
        nnz, dim = so.sparcml_result_nnz(res), so.sparcml_result_dim(res)
        dtype = NUMPY_DTYPE[so.sparcml_result_dtype(res)]
        values = np.empty(nnz, dtype=dtype)
        if nnz:
            ctypes.memmove(values.ctypes.data, so.sparcml_result_values(res), nnz * dtype.itemsize)
        if so.sparcml_result_is_dense(res):
            return np.arange(dim, dtype=np.uint32), values
        indices = np.empty(nnz, dtype=np.uint32)
        if nnz:
            ctypes.memmove(indices.ctypes.data, so.sparcml_result_indices(res), nnz * 4)
        return indices, values
