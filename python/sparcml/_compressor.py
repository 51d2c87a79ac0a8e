"""The gradient compressor: top-k with error feedback, reduced sparsely."""

import ctypes

import numpy as np

from . import errors
from ._arrays import NUMPY_DTYPE, Bad, buffer

QUANTS = {None: 0, "none": 0, "fp16": 1, "bf16": 2, "q8": 3, "q4": 4, "q2": 5}
METHODS = {"exact": 0, "sampled": 1, "reuse": 2, "random": 3}
SCOPES = {"union": 0, "global": 1}


class Compressor:
    """The compressed reduction of one gradient buffer, step after step.

        comp = sparcml.Compressor(comm, density=0.01)
        comp.reduce(grad)          # in place: grad holds the average

    Each reduce(grad) adds grad into the error-feedback residual, selects
    the density * grad.size entries of largest magnitude, sums every
    rank's selection with the sparse allreduce and writes the average (the
    sum divided by comm.size, zero where no rank sent anything) into grad,
    in place. What was not sent stays in the residual and is added to the
    next step's gradient (error_feedback=False drops it instead). quant
    encodes the values sent: None, "fp16", "bf16", "q8", "q4" or "q2" (the
    indices stay exact); method chooses the entries: "exact" (top-k, ties
    to the lower index), "sampled", "reuse" or "random". scope="global"
    keeps only about density * grad.size of the summed entries, the
    largest over every rank (Ok-Topk's global top-k: about twice that many
    entries sent per rank whatever comm.size), each rank's selected
    entries the global selection dropped going back into its residual;
    "union" (the default) keeps every rank's selection (docs/COMPRESSION.md).

    A Compressor holds the state of one buffer: its first reduce fixes the
    length and dtype (C-contiguous float32 or float64) and allocates the
    residual, one element per gradient element. That first reduce is
    collective, like every later one: every rank must create and use its
    compressors in the same order, with the same arguments. Bad arguments
    on one rank (a density outside (0, 1], an unknown quant, a wrong array)
    raise InvalidArgument there and fail the same call on every other rank
    (Aborted); arguments that differ between ranks raise Mismatch on every
    rank."""

    def __init__(self, comm, density=0.01, quant=None, error_feedback=True, method="exact", scope="union"):
        self.comm = comm
        self.density = density
        self.quant = quant
        self.error_feedback = bool(error_feedback)
        self.method = method
        self.scope = scope
        self._h = None
        self.size = None  # the gradient's length, known from the first reduce
        self.dtype = None

    def _create(self, array):
        op = "compressor-create"
        comm = self.comm
        try:
            ptr, n, dt = buffer(array, "grad", True)
            if not isinstance(self.density, (int, float, np.floating)) or not 0 < self.density <= 1:
                raise Bad("density %r is outside (0, 1]" % (self.density,))
            q = QUANTS.get(self.quant.lower() if isinstance(self.quant, str) else self.quant)
            if q is None:
                raise Bad("unknown quant %r (want None, 'fp16', 'bf16', 'q8', 'q4' or 'q2')" % (self.quant,))
            m = METHODS.get(self.method)
            if m is None:
                raise Bad("unknown method %r (want 'exact', 'sampled', 'reuse' or 'random')" % (self.method,))
            s = SCOPES.get(self.scope)
            if s is None:
                raise Bad("unknown scope %r (want 'union' or 'global')" % (self.scope,))
        except Bad as e:
            comm._bad(op, e)
        h = ctypes.c_void_p()
        rc = comm._so.sparcml_compressor_create_scoped(comm._handle(op), n, dt, float(self.density), q,
                                                       int(self.error_feedback), m, s, ctypes.byref(h))
        if rc:
            comm._raise(rc)
        self._h, self.size, self.dtype = h, n, NUMPY_DTYPE[dt]
        comm._compressors.add(self)

    def reduce(self, grad):
        """Replaces grad, this rank's gradient, by the average over the ranks
        of what each selected (see the class); returns grad. If it raises
        once the reduction started, grad still holds the gradient, which is
        already in the residual: do not apply it, nor reduce it again."""
        if self._h is None:
            self._create(grad)
        op = "global-topk" if self.scope == "global" else "sparse-allreduce"
        try:
            ptr, n, dt = buffer(grad, "grad", True)
            if n != self.size or NUMPY_DTYPE[dt] != self.dtype:
                raise Bad("grad has %d %s elements; this compressor reduces %d %s" % (
                    n, grad.dtype, self.size, self.dtype))
        except Bad as e:
            self.comm._bad(op, e)
        self.comm._handle(op)
        rc = self.comm._so.sparcml_compressor_reduce(self._h, ptr, n)
        if rc:
            self.comm._raise(rc)
        return grad

    def start(self, grad):
        """Starts reduce(grad) and returns a sparcml.Request whose wait()
        returns grad holding the average: the selection runs here, the
        reduction in the background. grad must not be touched until then.
        One reduction per Compressor is in flight (a second start waits
        for the first)."""
        if self._h is None:
            self._create(grad)
        op = "sparse-allreduce"
        try:
            ptr, n, dt = buffer(grad, "grad", True)
            if n != self.size or NUMPY_DTYPE[dt] != self.dtype:
                raise Bad("grad has %d %s elements; this compressor reduces %d %s" % (
                    n, grad.dtype, self.size, self.dtype))
        except Bad as e:
            self.comm._bad(op, e)
        self.comm._handle(op)
        return self.comm._start(self.comm._so.sparcml_compressor_start, (self._h, ptr, n), op, (grad,), value=grad)

    def residual(self):
        """A copy of the error-feedback residual (what was accumulated and
        not yet sent; zeros without error feedback); None before the first
        reduce."""
        if self._h is None:
            return None
        out = np.empty(self.size, dtype=self.dtype)
        rc = self.comm._so.sparcml_compressor_residual(self._h, out.ctypes.data, out.size)
        if rc:
            self.comm._raise(rc)
        return out

    def close(self):
        """Releases the residual. Local; idempotent. The communicator's
        finalize() closes its compressors."""
        h, self._h = self._h, None
        if h is not None:
            self.comm._compressors.discard(self)
            rc = self.comm._so.sparcml_compressor_destroy(h)
            if rc:
                raise errors.from_last_error(self.comm._so, rc)

    def __repr__(self):
        return "<sparcml.Compressor density %g quant %s%s %s>" % (
            self.density, self.quant, "" if self.error_feedback else " no-EF",
            "of %d %s" % (self.size, self.dtype) if self._h is not None else "not yet created")

