"""sparcml for PyTorch: the "sparcml" torch.distributed backend, DDP
communication hooks and sparse gradients.

    import sparcml.torch                          # registers the backend
    dist.init_process_group("sparcml")            # no gloo group needed

Every operation returns a Work completed by sparcml's non-blocking
request (see _backend.py for what each maps onto, docs/PYTORCH.md for the
reference). The hooks below work on that backend and on gloo:

    import sparcml.torch as st
    ddp = DistributedDataParallel(model)          # gloo still sets DDP up
    ddp.register_comm_hook(None, st.allreduce_hook)

allreduce_hook reduces each gradient bucket with sparcml's dense
allreduce instead of the process group's, averaged as DDP's own reduction
does. topk_hook sends only the largest entries of each bucket, with error
feedback, through sparcml's sparse allreduce:

    state = st.TopkState(density=0.01)            # 1% of each bucket per step
    ddp.register_comm_hook(state, st.topk_hook)

allreduce_sparse sums the sparse COO gradients of nn.Embedding(sparse=True)
with sparcml's sparse allreduce, moving only the rows touched.

The communicator is the hook's state when that is a sparcml.Comm, else the
default one: the "sparcml" process group's when that is the default
group, else one made from the launcher's environment the first time it is
needed (default_comm). CPU tensors of float32 or float64. The hooks start
their reduction and return a Future that sparcml's request completes, so
DDP overlaps bucket communication with the rest of backward.
"""

import math
import os
import threading

import numpy as np
import torch

import sparcml
from sparcml._arrays import nonzero_rows

from . import _progress

_default = None
_default_lock = threading.Lock()


def _set_world_comm(comm):
    """Called by the backend: its world communicator becomes the default."""
    global _default
    with _default_lock:
        _default = comm


def default_comm():
    """The process's communicator: the one sparcml.init() made from the
    launcher's environment, made on first use if the application has not,
    and finalized at exit. A hook whose state is a sparcml.Comm uses that
    one instead.

    Under torchrun-style variables alone (RANK, WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT, no SPARCML_ADDR or SPARCML_PORT), the process group's store
    holds MASTER_PORT, so sparcml's rendezvous uses MASTER_PORT+1."""
    global _default
    with _default_lock:
        if _default is None or _default._h is None:
            addr = _rendezvous_beside_torch()
            _default = sparcml.init() if addr is None else sparcml.init(addr=addr)
        return _default


def _rendezvous_beside_torch():
    env = os.environ
    if env.get("SPARCML_ADDR") or env.get("SPARCML_PORT") or env.get("SPARCML_RANK"):
        return None
    host, port = env.get("MASTER_ADDR"), env.get("MASTER_PORT")
    if not host or not port or not port.isdigit():
        return None
    return "%s:%d" % (host, int(port) + 1)


def init_process_group(backend="gloo", **kwargs):
    """Initializes torch.distributed's default process group, which DDP
    needs for its own set-up, in the same job as the default communicator.

    Under torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    this is torch.distributed.init_process_group(backend) from them. Without
    them (a launcher that sets only sparcml's own, such as `sparcml run`
    before it exported torchrun's), rank and size come from sparcml, and rank
    0 picks a free port on its rendezvous host and tells the others through
    sparcml. kwargs go to torch.distributed.init_process_group."""
    import torch.distributed as dist

    comm = default_comm()
    env = os.environ
    if all(env.get(v) for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        dist.init_process_group(backend, **kwargs)
        return comm
    host = env.get("SPARCML_ADDR", "127.0.0.1:0").rsplit(":", 1)[0].strip("[]") or "127.0.0.1"
    port = np.zeros(1)
    if comm.rank == 0:
        import socket
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port[0] = s.getsockname()[1]
    comm.broadcast(port, root=0)
    url = "tcp://%s:%d" % ("[%s]" % host if ":" in host else host, int(port[0]))
    dist.init_process_group(backend, init_method=url, rank=comm.rank, world_size=comm.size, **kwargs)
    return comm


def _comm(state):
    if isinstance(state, sparcml.Comm):
        return state
    comm = getattr(state, "comm", None)
    if isinstance(comm, sparcml.Comm):
        return comm
    return default_comm()


def _numpy(comm, tensor, op):
    """A NumPy view of tensor's memory (no copy), or a failure of op on
    every rank if tensor cannot be reduced in place."""
    if not isinstance(tensor, torch.Tensor):
        comm.fail(op, "expected a torch.Tensor, not %s" % type(tensor).__name__)
    if tensor.device.type != "cpu":
        comm.fail(op, "tensor is on %s; sparcml.torch reduces CPU tensors" % tensor.device)
    if tensor.dtype not in (torch.float32, torch.float64):
        comm.fail(op, "tensor has dtype %s; sparcml reduces float32 and float64" % tensor.dtype)
    if not tensor.is_contiguous():
        comm.fail(op, "tensor is not contiguous; sparcml works in place")
    return tensor.detach().numpy()


def allreduce(tensor, op="sum", comm=None):
    """Reduces a contiguous CPU tensor across ranks in place ("sum", "avg",
    "min", "max"); returns it."""
    comm = _comm(comm)
    comm.allreduce(_numpy(comm, tensor, "allreduce"), op=op)
    return tensor


def allreduce_hook(state, bucket):
    """DDP communication hook: the dense allreduce of the bucket through
    sparcml, averaged over the ranks (DDP's own reduction is an average).
    Starts the reduction and returns a Future of the bucket's tensor that
    completes with it.

    state is None (the default communicator) or a sparcml.Comm. Register
    with ddp.register_comm_hook(None, sparcml.torch.allreduce_hook)."""
    comm = _comm(state)
    buf = bucket.buffer()
    req = comm.start_allreduce(_numpy(comm, buf, "allreduce"), op="avg")
    return _progress.submit(comm, "allreduce", [req], lambda: buf).future


class TopkState:
    """The state of topk_hook: its settings and one sparcml.Compressor per
    DDP bucket (keyed by the bucket's index), each holding that bucket's
    error-feedback residual.

    density: the fraction of each bucket sent per step, in (0, 1].
    error_feedback: keep what was not sent and add it to the next step's
        gradient (off only for ablations: below a few percent, training
        without it usually loses accuracy).
    quant: the encoding of the values sent (None, "fp16", "bf16", "q8",
        "q4", "q2"; the indices stay exact).
    method: how the entries are chosen ("exact" top-k, "sampled",
        "reuse", "random"; see docs/COMPRESSION.md).
    scope: "union" sums every rank's selection; "global" keeps about
        density of each bucket's sums, the largest over every rank
        (Ok-Topk's global top-k; the rest goes back into the residuals).
    start_iter: the iterations reduced dense before compression starts
        (at least 2 with error feedback: DDP rebuilds its buckets after the
        first iteration, so a residual kept for the first layout would be
        added to the wrong parameters; as PowerSGD's start_powerSGD_iter).
    comm: the sparcml.Comm to use; None for the default one, made from the
        launcher's environment when the hook first runs.

    Memory: each bucket's residual is one float per parameter (4 bytes for
    float32, the size of the model's gradients again), kept for the state's
    life; the selection and the received sum take about 8 * density bytes
    per parameter per rank more (indices and values), and the sum at most
    4 bytes per parameter when it comes back dense. Without error feedback
    there is no residual.

    iter counts the iterations seen (the hook counts one when it reduces
    bucket 0, the last of each iteration); numel_before and numel_sent
    count the elements given to the compressors and the entries asked of
    them (compression_stats())."""

    __slots__ = ["density", "error_feedback", "quant", "method", "scope", "start_iter", "comm", "iter",
                 "compressors", "numel_before", "numel_sent"]

    def __init__(self, density=0.01, error_feedback=True, quant=None, method="exact", start_iter=2, comm=None,
                 scope="union"):
        if not 0 < density <= 1:
            raise ValueError("density %r is outside (0, 1]" % (density,))
        if error_feedback and start_iter < 2:
            raise ValueError("start_iter %d: with error feedback at least 2, since DDP rebuilds its buckets "
                             "after the first iteration" % start_iter)
        self.density, self.error_feedback, self.quant, self.method = density, bool(error_feedback), quant, method
        if scope not in ("union", "global"):
            raise ValueError("scope %r: want 'union' or 'global'" % (scope,))
        self.start_iter, self.comm, self.scope = start_iter, comm, scope
        self.iter = 0
        self.compressors = {}
        self.numel_before = self.numel_sent = 0

    def compression_stats(self):
        """(rate, numel_before, numel_sent): the elements given to the
        compressors, the entries they were asked to send (ceil(density * n)
        per bucket; the sampled method sends about as many), and their
        ratio."""
        rate = self.numel_before / self.numel_sent if self.numel_sent else 0.0
        return rate, self.numel_before, self.numel_sent

    def _compressor(self, comm, index, n):
        comp = self.compressors.get(index)
        if comp is not None and comp.size not in (None, n):
            comp.close()  # the bucket changed size: its residual no longer fits
            comp = None
        if comp is None:
            comp = sparcml.Compressor(comm, density=self.density, quant=self.quant,
                                      error_feedback=self.error_feedback, method=self.method, scope=self.scope)
            self.compressors[index] = comp
        return comp

    def _count(self, bucket):
        if bucket.is_last():
            self.iter += 1


def topk_hook(state, bucket):
    """DDP communication hook: top-k of each bucket with error feedback,
    summed over the ranks with sparcml's sparse allreduce, averaged, and
    written back into the bucket (entries no rank sent are zero). The
    first state.start_iter iterations are reduced dense.

    state is a TopkState. Register with
    ddp.register_comm_hook(sparcml.torch.TopkState(density=0.01),
    sparcml.torch.topk_hook). CPU float32 or float64 buckets; the hook
    selects at once, starts the reduction and returns a Future of the
    bucket's tensor that completes with it."""
    if not isinstance(state, TopkState):
        raise TypeError("topk_hook's state is a sparcml.torch.TopkState, not %s" % type(state).__name__)
    comm = _comm(state)
    buf = bucket.buffer()
    if state.iter < state.start_iter:
        req = comm.start_allreduce(_numpy(comm, buf, "allreduce"), op="avg")
    else:
        comp = state._compressor(comm, bucket.index(), buf.numel())
        op = "sparse-allreduce" if comp.size is not None else "compressor-create"
        req = comp.start(_numpy(comm, buf, op))
        state.numel_before += buf.numel()
        state.numel_sent += min(buf.numel(), math.ceil(state.density * buf.numel()))
    state._count(bucket)
    return _progress.submit(comm, "topk", [req], lambda: buf).future


def allreduce_sparse(tensor, comm=None, average=False):
    """Sums a sparse COO tensor across ranks with sparcml's sparse allreduce
    and returns the sum as a coalesced sparse COO tensor of the same shape
    (averaged over the ranks with average=True).

    For nn.Embedding(sparse=True), whose gradient holds whole rows: only
    the rows some rank touched travel, each row of d values as one index
    and its d values (Comm.sparse_allreduce_rows). The result holds the
    rows whose sum has a nonzero value. Every rank must pass the same
    shape; each may touch different rows, none included. The tensor need
    not be coalesced. The number of rows must fit in 2^32."""
    comm = _comm(comm)
    op = "sparse-allreduce"
    if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.sparse_coo:
        comm.fail(op, "allreduce_sparse takes a sparse COO tensor, not %s" % (
            tensor.layout if isinstance(tensor, torch.Tensor) else type(tensor).__name__))
    if tensor.device.type != "cpu" or tensor.dtype not in (torch.float32, torch.float64):
        comm.fail(op, "allreduce_sparse takes a CPU float32 or float64 tensor, not %s on %s" % (
            tensor.dtype, tensor.device))
    if tensor.sparse_dim() < 1:
        comm.fail(op, "allreduce_sparse takes a tensor with at least one sparse dimension")
    shape = tuple(tensor.shape)
    t = tensor.detach().coalesce()
    sparse_shape, dense_shape = shape[:t.sparse_dim()], shape[t.sparse_dim():]
    nrows, block = math.prod(sparse_shape), math.prod(dense_shape)
    if nrows > 1 << 32:
        comm.fail(op, "a tensor of %d rows: sparcml's sparse vectors hold at most 2^32" % nrows)
    # Coalesced indices are sorted lexicographically, so the linear row
    # numbers are increasing.
    rows = np.ravel_multi_index(t.indices().numpy(), sparse_shape).astype(np.uint32)
    values = np.ascontiguousarray(t.values().numpy().reshape(rows.size, block))
    out_rows, out_val = comm.sparse_allreduce_rows(rows, values, nrows)
    keep = nonzero_rows(out_val)
    if keep is not None:  # rows that summed to zero: dropped
        out_rows, out_val = out_rows[keep], out_val[keep]
    if average:
        out_val = out_val / out_val.dtype.type(comm.size)
    indices = np.stack(np.unravel_index(out_rows.astype(np.int64), sparse_shape))
    values_out = torch.from_numpy(np.ascontiguousarray(out_val).reshape((-1,) + dense_shape))
    return torch.sparse_coo_tensor(torch.from_numpy(indices.astype(np.int64)), values_out, shape,
                                   check_invariants=False, is_coalesced=True)


from ._backend import SparcmlBackend as SparcmlBackend  # noqa: E402 - after what it shares (default_comm)
from ._backend import register  # noqa: E402
from ._launch import install as _install_launchers  # noqa: E402

register()
_install_launchers()
