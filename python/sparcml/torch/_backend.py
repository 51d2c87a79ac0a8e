"""The "sparcml" backend of torch.distributed: a Python c10d Backend over a
sparcml communicator.

    import sparcml.torch               # registers the backend
    dist.init_process_group("sparcml")

Each operation starts sparcml's non-blocking request(s) on the calling
thread and returns a Work whose wait() waits for them there, and whose
get_future() hands them to the communicator's progress thread
(_progress.py); a synchronous all_reduce (torch waits at once) runs the
blocking call instead. How each operation maps onto the library:

- all_reduce of float32/float64: sparcml's allreduce, in place (zero copy
  for contiguous tensors); float16/bfloat16 are widened to float32,
  reduced, and rounded once; SUM, AVG, MIN, MAX.
- PRODUCT, and integer or bool tensors: every rank's tensor is gathered
  (allgatherv) and reduced here in rank order, exactly; P times the bytes.
- all_reduce of a sparse COO tensor (SUM or AVG), row-sparse: one sparse
  allreduce of rows, a row of d values travelling as one index and d
  values; rows whose sum is all zero are dropped.
- all_gather, broadcast, send/recv, gather, scatter, all_to_all move bytes
  (allgatherv, broadcast, point-to-point messages) for any dtype.
- reduce_scatter: sparcml's reduce-scatter (the allgather path above for
  PRODUCT and integers); reduce is an all_reduce.
- Subgroups (dist.new_group) are Comm.Split of the world's communicator,
  through torch's own split protocol (see create).
"""

import datetime
import math
import secrets
import socket

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import Work as _C10dWork

import sparcml
from sparcml._arrays import DTYPES, OPS, nonzero_rows

from . import _progress

R = dist.ReduceOp.RedOpType
LIBRARY_OPS = {R.SUM: "sum", R.AVG: "avg", R.MIN: "min", R.MAX: "max"}
OP_CODES = {kind: OPS[name] for kind, name in LIBRARY_OPS.items()}  # the C ABI's sparcml_op
NATIVE = (torch.float32, torch.float64)
DTYPE_CODES = {torch.float32: DTYPES[np.dtype(np.float32)], torch.float64: DTYPES[np.dtype(np.float64)]}
WIDENED = (torch.float16, torch.bfloat16)


class Unsupported(Exception):
    """An argument this backend cannot handle (raised on every rank)."""


class Work(_C10dWork):
    """A c10d Work over one Pending: wait() and get_future() complete when
    sparcml's requests have and the results are in the caller's tensors.
    wait() waits for the requests on the calling thread; get_future() hands
    them to the progress thread (_progress.py)."""

    def __init__(self, pending):
        super().__init__()
        self._p = pending

    def wait(self, timeout=None):
        t = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
        self._p.wait(t if t and t > 0 else None)
        return True

    def get_future(self):
        return self._p.future

    def is_completed(self):
        return self._p.poll()

    def is_success(self):
        return self._p.done.is_set() and self._p.error is None

    def exception(self):
        return self._p.error


def _words(t):
    """A float32 NumPy view of contiguous tensor t's bytes (the library
    moves float32 and float64 only; bytes are moved as float32 words,
    never computed on), and what to run once the operation wrote into it
    (None when the view is t's own memory)."""
    b = t.reshape(-1).view(torch.uint8)
    n = b.numel()
    if n % 4 == 0 and b.data_ptr() % 4 == 0:
        return b.view(torch.float32).numpy(), None
    pad = torch.zeros((n + 3) // 4 * 4, dtype=torch.uint8)
    pad[:n] = b
    return pad.view(torch.float32).numpy(), lambda: b.copy_(pad[:n])


def _from_words(words, nbytes, like):
    """The tensor of like's dtype and shape held in the first nbytes of a
    float32 NumPy array of words."""
    return torch.from_numpy(words).view(torch.uint8)[:nbytes].view(like.dtype).reshape(like.shape)


def _contiguous(t):
    """t itself when contiguous, else a contiguous copy and its copy-back."""
    if t.is_contiguous():
        return t, None
    c = t.contiguous()
    return c, lambda: t.copy_(c)


def _then(*steps):
    steps = [s for s in steps if s is not None]
    return (lambda: [s() for s in steps]) if steps else None


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta) and timeout.total_seconds() > 0:
        return timeout.total_seconds()
    return None


class SparcmlBackend(_C10dBackend):
    """torch.distributed's process group backend on a sparcml.Comm."""

    def __init__(self, comm, timeout=None):
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self._default_timeout = _seconds(timeout)
        self._timeout = self._default_timeout
        comm.set_timeout(self._timeout)

    def getBackendName(self):  # noqa: N802 - c10d's name
        return "sparcml"

    # ---- subgroups: torch's communicator split (see create) ----

    # Read by torch's new_group: the world's backend can be split.
    supports_splitting = True

    def eager_connect_single_device(self, device):
        """torch's hook for a group bound to a device: the communicator is
        connected already."""

    def perform_nocolor_split(self, device):
        """torch calls this on a rank outside a new group (instead of
        creating a backend there): its part of the collective split."""
        self.comm.split(-1)

    # ---- plumbing ----

    def _begin(self, op, opts):
        """Applies opts.timeout (or the group's) to what op starts."""
        t = _seconds(getattr(opts, "timeout", None)) or self._default_timeout
        if t != self._timeout:
            self.comm.set_timeout(t)
            self._timeout = t

    def _fail(self, op, reason):
        """Fails op on every rank (the others raise at its wait) and raises
        here."""
        try:
            self.comm.fail(op, "torch backend: %s" % reason)
        except sparcml.Error as e:
            raise RuntimeError("sparcml: rank %d: %s: %s" % (self.comm.rank, op, reason)) from e

    def _check(self, op, t, sparse=False):
        if not isinstance(t, torch.Tensor):
            self._fail(op, "expected a tensor, not %s" % type(t).__name__)
        if t.device.type != "cpu":
            self._fail(op, "tensor on %s: the sparcml backend handles CPU tensors" % t.device)
        if t.layout != torch.strided and not (sparse and t.layout == torch.sparse_coo):
            self._fail(op, "layout %s is not supported by %s" % (t.layout, op))
        if t.is_complex():
            self._fail(op, "complex dtype %s is not supported" % t.dtype)

    def _work(self, op, requests, finish=None, value=None):
        def done():
            if finish is not None:
                finish()
            return value
        return Work(_progress.submit(self.comm, op, requests, done))

    # ---- all_reduce ----

    def allreduce(self, tensors, opts):
        self._begin("allreduce", opts)
        if len(tensors) == 1 and not getattr(opts, "asyncOp", True) and self._reduce_now(tensors[0], opts.reduceOp.op):
            # Complete already, so no Work: torch's blocking wrappers (the
            # callers that pass asyncOp false: dist.all_reduce, reduce,
            # all_reduce_coalesced) then skip work.wait(), a call from
            # Python into torch and back into the Work's Python
            # (python/tools/call_bench.py).
            return None
        reqs, steps = [], []
        for t in tensors:
            r, s = self._start_allreduce("allreduce", t, opts.reduceOp.op)
            reqs += r
            steps.append(s)
        return self._work("allreduce", reqs, _then(*steps), list(tensors))

    def allreduce_coalesced(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        return self.allreduce(tensors, opts)

    def _start_allreduce(self, op, t, kind):
        self._check(op, t, sparse=True)
        if t.layout == torch.sparse_coo:
            return self._start_sparse(op, t, kind)
        code = OP_CODES.get(kind)
        if code is not None and (t.dtype in NATIVE or t.dtype in WIDENED):
            if t.dtype in NATIVE:
                work, back = _contiguous(t)
            else:
                work = t.to(torch.float32, memory_format=torch.contiguous_format)

                def back():
                    t.copy_(work)  # rounded once, from the float32 sum
            comm = self.comm
            req = comm._start(comm._so.sparcml_start_allreduce,
                              (comm._handle(op), work.data_ptr(), work.numel(), DTYPE_CODES[work.dtype], code),
                              op, (work,), value=work)
            return [req], back
        return self._start_gathered_reduce(op, t, kind, None)

    def _reduce_now(self, t, kind):
        """The blocking allreduce of t in place, when torch waits for the
        operation at once (opts.asyncOp false: a plain dist.all_reduce) and
        t needs nothing around the library's call: a contiguous float32 or
        float64 CPU tensor and SUM, AVG, MIN or MAX. False (nothing done)
        otherwise. Starting a request and waiting for it costs a hand-over
        between threads inside the library that the blocking call does not
        (python/tools/call_bench.py)."""
        code = OP_CODES.get(kind)
        dtype = DTYPE_CODES.get(t.dtype) if isinstance(t, torch.Tensor) else None
        if code is None or dtype is None or t.layout != torch.strided or not t.is_cpu or not t.is_contiguous():
            return False
        comm = self.comm
        rc = comm._so.sparcml_allreduce(comm._handle("allreduce"), t.data_ptr(), t.numel(), dtype, code)
        if rc:
            comm._raise(rc)
        return True

    def _start_gathered_reduce(self, op, t, kind, block):
        """Reduces t (or, with block=(rank's offset, length), that block of
        it, into block's output) from every rank's copy, gathered."""
        if kind not in (R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG):
            self._fail(op, "reduce op %s is not supported" % kind)
        if kind == R.AVG and not (t.is_floating_point()):
            self._fail(op, "AVG of %s tensors is not supported" % t.dtype)
        c = t.detach().contiguous()
        send, _ = _words(c)
        recv = np.empty(send.size * self.comm.size, dtype=np.float32)
        req = self.comm.start_allgather(send, recv)

        def back():
            per = recv.reshape(self.comm.size, -1)
            parts = [_from_words(per[r], c.numel() * c.element_size(), c) for r in range(self.comm.size)]
            acc = parts[0].clone()
            for p in parts[1:]:
                if kind in (R.SUM, R.AVG):
                    acc += p
                elif kind == R.PRODUCT:
                    acc *= p
                elif kind == R.MIN:
                    acc = torch.minimum(acc, p)
                else:
                    acc = torch.maximum(acc, p)
            if kind == R.AVG:
                acc /= self.comm.size
            if block is None:
                t.copy_(acc)
            else:
                out, start = block
                out.copy_(acc.reshape(-1)[start:start + out.numel()].reshape(out.shape))
        return [req], back

    def _start_sparse(self, op, t, kind):
        """Row-sparse all_reduce: one sparse allreduce of rows
        (sparcml_sparse_allreduce_rows), a row of d values travelling as
        one index and d values. The result holds the rows whose sum has a
        nonzero value, coalesced: gloo's result after coalesce(), but for
        rows that summed to exactly zero, which are dropped (the library
        may carry a range of the sum dense, where touched and untouched
        zero rows cannot be told apart)."""
        if kind not in (R.SUM, R.AVG):
            self._fail(op, "sparse tensors are reduced with SUM or AVG, not %s" % kind)
        if t.dtype not in NATIVE + WIDENED:
            self._fail(op, "sparse tensors of %s are not supported" % t.dtype)
        shape = tuple(t.shape)
        c = t.detach().coalesce()
        sparse_shape, dense_shape = shape[:c.sparse_dim()], shape[c.sparse_dim():]
        nrows, block = math.prod(sparse_shape), math.prod(dense_shape)
        if nrows > 1 << 32:
            self._fail(op, "a sparse tensor of %d rows: sparcml's sparse vectors hold at most 2^32" % nrows)
        vdtype = torch.float64 if t.dtype == torch.float64 else torch.float32
        # Coalesced indices are sorted lexicographically: their linear row
        # numbers are sorted and unique, as the sparse allreduce wants them.
        rows = np.ravel_multi_index(c.indices().numpy(), sparse_shape) if c._nnz() else np.zeros(0, np.int64)
        vals = c.values().reshape(rows.size, max(block, 1)).to(vdtype).contiguous().numpy()
        req = self.comm.start_sparse_allreduce_rows(rows.astype(np.uint32), vals, nrows, borrow=True)
        size = self.comm.size

        def back():
            idx, summed, done = req.wait()  # completed: views of the library's result
            try:
                self._copy_rows_into(t, idx, summed, kind == R.AVG, size, sparse_shape, dense_shape)
            finally:
                done()

        return [req], back

    @staticmethod
    def _copy_rows_into(t, idx, summed, average, size, sparse_shape, dense_shape):
        """Writes the rows of a sparse allreduce's result into the sparse
        tensor t (t.copy_ copies them out of the library's memory), but
        for the rows that summed to exactly zero."""
        keep = nonzero_rows(summed)
        if keep is not None:  # rows that summed to zero: dropped
            idx, summed = idx[keep], summed[keep]
        out = torch.from_numpy(summed)
        if average:
            out /= size
        if len(sparse_shape) == 1:
            index = torch.from_numpy(idx.astype(np.int64))[None]
        else:
            index = torch.from_numpy(np.stack(np.unravel_index(idx.astype(np.int64), sparse_shape)))
        t.copy_(torch.sparse_coo_tensor(index, out.reshape((-1,) + dense_shape).to(t.dtype),
                                        tuple(t.shape), check_invariants=False, is_coalesced=True))

    # ---- gathers and reduce-scatters ----

    def _start_allgather(self, op, outputs, t):
        """Gathers every rank's t into outputs[r] (tensors of rank r's
        size, any dtype)."""
        self._check(op, t)
        for o in outputs:
            self._check(op, o)
        if len(outputs) != self.comm.size:
            self._fail(op, "%d output tensors for %d ranks" % (len(outputs), self.comm.size))
        send, _ = _words(t.detach().contiguous())
        counts = [(o.numel() * o.element_size() + 3) // 4 for o in outputs]
        if counts[self.comm.rank] != send.size:
            self._fail(op, "input has %d bytes, output %d has %d" % (
                t.numel() * t.element_size(), self.comm.rank, outputs[self.comm.rank].numel() * outputs[0].element_size()))
        recv = np.empty(sum(counts), dtype=np.float32)
        req = self.comm.start_allgather(send, recv, counts=counts)

        def back():
            off = 0
            for o, n in zip(outputs, counts):
                o.copy_(_from_words(recv[off:off + n], o.numel() * o.element_size(), o))
                off += n
        return [req], back

    def allgather(self, output_tensors, input_tensors, opts):
        self._begin("allgather", opts)
        reqs, steps = [], []
        for outs, t in zip(output_tensors, input_tensors):
            r, s = self._start_allgather("allgather", outs, t)
            reqs += r
            steps.append(s)
        return self._work("allgather", reqs, _then(*steps), output_tensors)

    def allgather_coalesced(self, output_lists, input_tensors, opts):
        return self.allgather(output_lists, input_tensors, opts)

    def _start_allgather_single(self, op, output, t):
        if not output.is_contiguous():
            self._check(op, output)
            self._fail(op, "the output tensor is not contiguous")
        if output.numel() != t.numel() * self.comm.size or output.dtype != t.dtype:
            self._check(op, t)
            self._fail(op, "output has %d %s elements, not %d ranks x %d %s" % (
                output.numel(), output.dtype, self.comm.size, t.numel(), t.dtype))
        return self._start_allgather(op, list(output.reshape(-1).chunk(self.comm.size)) if t.numel() else
                                     [output.reshape(-1)[:0]] * self.comm.size, t)

    def all_gather_single(self, output, t, opts):
        self._begin("allgather", opts)
        reqs, back = self._start_allgather_single("allgather", output, t)
        return self._work("allgather", reqs, back, [output])

    def all_gather_single_coalesced(self, outputs, inputs, opts):
        self._begin("allgather", opts)
        reqs, steps = [], []
        for o, t in zip(outputs, inputs):
            r, s = self._start_allgather_single("allgather", o, t)
            reqs += r
            steps.append(s)
        return self._work("allgather", reqs, _then(*steps), outputs)

    def _start_reduce_scatter(self, op, out, flat, kind):
        """Reduces flat (this rank's size blocks, one tensor) and leaves
        block rank of the result in out."""
        self._check(op, out)
        self._check(op, flat)
        size = self.comm.size
        if flat.numel() != out.numel() * size:
            self._fail(op, "input has %d elements, not %d ranks x %d" % (flat.numel(), size, out.numel()))
        name = LIBRARY_OPS.get(kind)
        if name is not None and (out.dtype in NATIVE or out.dtype in WIDENED):
            wdt = out.dtype if out.dtype in NATIVE else torch.float32
            send = flat.detach().reshape(-1).to(wdt).contiguous()
            recv = torch.empty(out.numel(), dtype=wdt)
            req = self.comm.start_reduce_scatter(send.numpy(), recv.numpy(), op=name)

            def back():
                out.copy_(recv.reshape(out.shape))
            return [req], back
        return self._start_gathered_reduce(op, flat.reshape(-1), kind, (out, self.comm.rank * out.numel()))

    def reduce_scatter(self, output_tensors, input_lists, opts):
        self._begin("reduce-scatter", opts)
        reqs, steps = [], []
        for out, ins in zip(output_tensors, input_lists):
            if len(ins) != self.comm.size or any(i.numel() != out.numel() for i in ins):
                self._fail("reduce-scatter", "want %d inputs of %d elements each" % (self.comm.size, out.numel()))
            r, s = self._start_reduce_scatter("reduce-scatter", out, torch.cat([i.reshape(-1) for i in ins]),
                                              opts.reduceOp.op)
            reqs += r
            steps.append(s)
        return self._work("reduce-scatter", reqs, _then(*steps), output_tensors)

    def reduce_scatter_single(self, output, t, opts):
        self._begin("reduce-scatter", opts)
        reqs, back = self._start_reduce_scatter("reduce-scatter", output, t, opts.reduceOp.op)
        return self._work("reduce-scatter", reqs, back, [output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        self._begin("reduce-scatter", opts)
        reqs, steps = [], []
        for o, t in zip(outputs, inputs):
            r, s = self._start_reduce_scatter("reduce-scatter", o, t, opts.reduceOp.op)
            reqs += r
            steps.append(s)
        return self._work("reduce-scatter", reqs, _then(*steps), outputs)

    # ---- broadcast, barrier ----

    def broadcast(self, tensors, opts):
        self._begin("broadcast", opts)
        reqs, steps = [], []
        for t in tensors:
            self._check("broadcast", t)
            c, back = _contiguous(t)
            words, unpad = _words(c)
            reqs.append(self.comm.start_broadcast(words, root=opts.rootRank))
            steps += [unpad, back]
        return self._work("broadcast", reqs, _then(*steps), list(tensors))

    def barrier(self, opts):
        self._begin("barrier", opts)
        return self._work("barrier", [self.comm.start_barrier()], None, [])

    # ---- point to point ----

    def _peer(self, op, peer, tag):
        if tag:
            raise RuntimeError("sparcml: rank %d: %s: tag %d: the sparcml backend matches messages between two "
                               "ranks in the order they were sent, without tags (use tag 0)" % (self.comm.rank, op, tag))
        if not 0 <= peer < self.comm.size or peer == self.comm.rank:
            raise RuntimeError("sparcml: rank %d: %s: peer %d is not another rank of %d" % (
                self.comm.rank, op, peer, self.comm.size))

    def _start_p2p(self, op, t, peer):
        c, back = _contiguous(t)
        words, unpad = _words(c)
        if op == "send":
            return self.comm.start_send(words, peer), None
        return self.comm.start_recv(words, peer), _then(unpad, back)

    def send(self, tensors, dst, tag):
        self._peer("send", dst, tag)
        reqs = [self._start_p2p("send", t, dst)[0] for t in tensors]
        return self._work("send", reqs, None, list(tensors))

    def recv(self, tensors, src, tag):
        self._peer("recv", src, tag)
        reqs, steps = [], []
        for t in tensors:
            r, s = self._start_p2p("recv", t, src)
            reqs.append(r)
            steps.append(s)
        return self._work("recv", reqs, _then(*steps), list(tensors))

    def _exchange(self, op, outs, ins):
        """Sends ins[r] to rank r and receives outs[r] from it (empty ones
        are skipped on both sides, which agree on the sizes)."""
        reqs, steps = [], []
        me = self.comm.rank
        for peer in range(self.comm.size):
            if peer == me:
                continue
            if ins[peer].numel():
                r, _ = self._start_p2p("send", ins[peer], peer)
                reqs.append(r)
            if outs[peer].numel():
                r, s = self._start_p2p("recv", outs[peer], peer)
                reqs.append(r)
                steps.append(s)
        outs[me].copy_(ins[me])
        return reqs, _then(*steps)

    def all_to_all_single(self, output, t, output_split_sizes, input_split_sizes, opts):
        self._begin("alltoall", opts)
        self._check("alltoall", t)
        self._check("alltoall", output)
        size = self.comm.size
        if not input_split_sizes:
            input_split_sizes = [t.shape[0] // size] * size if t.dim() else [0] * size
        if not output_split_sizes:
            output_split_sizes = [output.shape[0] // size] * size if output.dim() else [0] * size
        ins = list(t.split(list(input_split_sizes))) if t.dim() else [t] * size
        outs = list(output.split(list(output_split_sizes))) if output.dim() else [output] * size
        reqs, back = self._exchange("alltoall", outs, ins)
        return self._work("alltoall", reqs, back, [output])

    def alltoall(self, output_tensors, input_tensors, opts):
        self._begin("alltoall", opts)
        for t in list(output_tensors) + list(input_tensors):
            self._check("alltoall", t)
        reqs, back = self._exchange("alltoall", list(output_tensors), list(input_tensors))
        return self._work("alltoall", reqs, back, list(output_tensors))

    def gather(self, output_lists, input_tensors, opts):
        self._begin("gather", opts)
        root, me = opts.rootRank, self.comm.rank
        t = input_tensors[0]
        self._check("gather", t)
        if me != root:
            r, _ = self._start_p2p("send", t, root)
            return self._work("gather", [r], None, [])
        outs = output_lists[0]
        reqs, steps = [], []
        for peer in range(self.comm.size):
            if peer == me:
                outs[me].copy_(t)
            else:
                r, s = self._start_p2p("recv", outs[peer], peer)
                reqs.append(r)
                steps.append(s)
        return self._work("gather", reqs, _then(*steps), output_lists)

    def scatter(self, output_tensors, input_lists, opts):
        self._begin("scatter", opts)
        root, me = opts.rootRank, self.comm.rank
        out = output_tensors[0]
        self._check("scatter", out)
        if me != root:
            r, s = self._start_p2p("recv", out, root)
            return self._work("scatter", [r], s, [out])
        ins = input_lists[0]
        reqs = []
        for peer in range(self.comm.size):
            if peer == me:
                out.copy_(ins[me])
            else:
                reqs.append(self._start_p2p("send", ins[peer], peer)[0])
        return self._work("scatter", reqs, None, [out])

    # ---- life cycle ----

    def shutdown(self):
        self.comm.finalize()

    def abort(self):
        self.comm.abort("the process group was aborted")


# ---- creation: every group's communicator meets through the group's store ----

def _store_host(store):
    while store is not None:
        host = getattr(store, "host", None)
        if host:
            return host
        store = getattr(store, "underlying_store", None)
    return None


def _local_address(store):
    """The address of this host the other ranks reach: the one it uses to
    reach the store's host (loopback for a store on this host or a file)."""
    host = _store_host(store)
    if not host or host in ("localhost", "127.0.0.1", "::1"):
        return "127.0.0.1"
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))  # no packet is sent: this picks the route
            return s.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _free_port(host):
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rendezvous(store, rank, size):
    """A new sparcml communicator of the ranks sharing store: rank 0 picks
    the rendezvous address and a token and publishes them there."""
    if rank == 0:
        host = _local_address(store)
        port = _free_port(host)
        store.set("sparcml/addr", "%s:%d" % ("[%s]" % host if ":" in host else host, port))
        store.set("sparcml/token", secrets.token_hex(16))
    addr = store.get("sparcml/addr").decode()
    token = store.get("sparcml/token").decode()
    return sparcml.init(rank=rank, size=size, addr=addr, token=token)


def create(opts, backend_options=None):
    """The creator registered with torch.distributed.Backend (extended API).

    The default group meets through its store. Its process group is then
    bound to the CPU device, the condition under which torch's new_group
    splits a communicator: on the new group's members it hands this
    creator the world's backend (opts.split_from), on every other rank it
    calls that backend's perform_nocolor_split, each in the order the
    application creates groups. So a subgroup is a Comm.Split of the
    world's communicator, collective over the world as torch's new_group
    is. A group made with use_local_synchronization=True (which the other
    ranks do not join; torch names it by a hash of its ranks, not by the
    group counter) meets through its store instead."""
    parent = getattr(opts, "split_from", None)
    if isinstance(parent, SparcmlBackend) and str(opts.group_id).isdigit():
        comm = parent.comm.split(0, opts.group_rank)
    else:
        comm, parent = rendezvous(opts.store, opts.group_rank, opts.group_size), None
    backend = SparcmlBackend(comm, opts.timeout)
    backend.split_from = parent
    if not opts.global_ranks_in_group:  # the default group
        from . import _set_world_comm
        _set_world_comm(comm)
        pg = getattr(opts, "process_group", None)
        if pg is not None and pg.bound_device_id is None:
            pg.bound_device_id = torch.device("cpu", 0)
    return backend


def register():
    """Registers "sparcml" with torch.distributed (idempotent)."""
    if "sparcml" not in dist.Backend.backend_list:
        dist.Backend.register_backend("sparcml", create, extended_api=True, devices=["cpu"])
    _declare_self_recording()


def _declare_self_recording():
    """Tells torch that the backend records its own operations, as gloo's
    registration does: sparcml's flight recorder keeps every operation
    (SPARCML_DUMP_DIR, `sparcml trace`, docs/RELIABILITY.md). Torch
    attaches its backend-agnostic FlightRecorderHook to every group whose
    backend is not in that set, and its pre and post hooks (the calling
    thread's name read by two system calls, an entry recorded) cost more
    per small call than the rest of the backend's path
    (python/tools/call_bench.py). Torch versions without the set have no
    such hook."""
    recording = getattr(dist.distributed_c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if isinstance(recording, set):
        recording.add("sparcml")
