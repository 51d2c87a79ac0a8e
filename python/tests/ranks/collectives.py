"""Tests of the sparcml Python package, run on every rank:

    sparcml run -n 3 --timeout 5m -- /usr/bin/python3 python/tests/ranks/collectives.py

with PYTHONPATH=python (make test-bindings does this). Every result is
checked against the reference computed here from every rank's seeded
input; every bad call must raise on every rank.
"""

import os
import time

import numpy as np

import sparcml
from harness import check_usable, expect_raises, rng, run, small_ints

SIZES = [0, 1, 7, 1000, 300001]
DTYPES = [np.float32, np.float64]
OPS = {"sum": np.sum, "min": np.min, "max": np.max}


def reference(name, n, dtype, op, size):
    stack = np.stack([small_ints(name, r, n, dtype) for r in range(size)])
    if op == "avg":
        return (stack.sum(axis=0) / dtype(size)).astype(dtype)
    return OPS[op](stack, axis=0).astype(dtype)


def test_init(comm):
    assert comm.rank == int(os.environ["SPARCML_RANK"]) and comm.size == int(os.environ["SPARCML_SIZE"])
    assert sparcml.library_version()[0] == 0
    assert "rank %d of %d" % (comm.rank, comm.size) in repr(comm)


def test_allreduce(comm):
    for dtype in DTYPES:
        for n in SIZES:
            for op in ["sum", "avg", "min", "max"]:
                name = "allreduce %s %d %s" % (dtype.__name__, n, op)
                a = small_ints(name, comm.rank, n, dtype)
                address = a.ctypes.data
                out = comm.allreduce(a, op=op)
                assert out is a and a.ctypes.data == address, "not in place"
                np.testing.assert_array_equal(a, reference(name, n, dtype, op, comm.size), err_msg=name)


def test_allreduce_views_and_shapes(comm):
    # A C-contiguous slice is reduced in place; the rest of its base is
    # untouched. A 2-D array is reduced over all its elements.
    base = np.full(100, -1.0, dtype=np.float32)
    view = base[10:20]
    view[:] = comm.rank
    comm.allreduce(view)
    assert (base[10:20] == comm.size * (comm.size - 1) / 2).all() and (base[:10] == -1).all() and (base[20:] == -1).all()
    m = small_ints("2d", comm.rank, 12, np.float64).reshape(3, 4)
    comm.allreduce(m, op="max")
    np.testing.assert_array_equal(m, reference("2d", 12, np.float64, "max", comm.size).reshape(3, 4))


def test_allreduce_random_floats(comm):
    # Not exact: the sum within rounding, and identical bits on every rank.
    x = rng("random", comm.rank).standard_normal(50000).astype(np.float32)
    want = sum(rng("random", r).standard_normal(50000).astype(np.float32).astype(np.float64)
               for r in range(comm.size))
    comm.allreduce(x)
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)
    root = comm.broadcast(x.copy(), root=0)
    assert np.array_equal(root, x), "ranks hold different results"


def test_reduce_scatter(comm):
    for dtype in DTYPES:
        for n in SIZES:
            m = n // comm.size
            name = "rs %s %d" % (dtype.__name__, m)
            send = small_ints(name, comm.rank, m * comm.size, dtype)
            out = comm.reduce_scatter(send, op="sum")
            want = reference(name, m * comm.size, dtype, "sum", comm.size)[comm.rank * m:(comm.rank + 1) * m]
            np.testing.assert_array_equal(out, want, err_msg=name)
            recv = np.empty(m, dtype)
            assert comm.reduce_scatter(send, recv, op="avg") is recv
            np.testing.assert_array_equal(
                recv, reference(name, m * comm.size, dtype, "avg", comm.size)[comm.rank * m:(comm.rank + 1) * m])


def test_allgather(comm):
    for dtype in DTYPES:
        for n in SIZES:
            name = "ag %s %d" % (dtype.__name__, n)
            out = comm.allgather(small_ints(name, comm.rank, n, dtype))
            want = np.concatenate([small_ints(name, r, n, dtype) for r in range(comm.size)])
            np.testing.assert_array_equal(out, want, err_msg=name)


def test_allgatherv(comm):
    for n in SIZES:
        counts = [(r * n) % (n + 3) if n else 0 for r in range(comm.size)]
        name = "agv %d" % n
        out = comm.allgatherv(small_ints(name, comm.rank, counts[comm.rank], np.float32), counts)
        want = np.concatenate([small_ints(name, r, counts[r], np.float32) for r in range(comm.size)])
        np.testing.assert_array_equal(out, want, err_msg=name)


def test_broadcast_and_barrier(comm):
    for root in range(comm.size):
        for n in SIZES:
            name = "bc %d %d" % (root, n)
            a = small_ints(name, root, n, np.float64) if comm.rank == root else np.full(n, np.nan)
            comm.broadcast(a, root=root)
            np.testing.assert_array_equal(a, small_ints(name, root, n, np.float64), err_msg=name)
    comm.barrier()


def sparse_input(name, rank, dim, density, dtype):
    """Unsorted indices with repeats, as an embedding's gradient has."""
    g = rng(name, rank)
    nnz = int(dim * density)
    idx = g.integers(0, dim, size=nnz) if dim else np.zeros(0, np.int64)
    return idx, g.integers(1, 5, size=nnz).astype(dtype)


def sparse_reference(name, dim, density, dtype, size):
    dense, present = np.zeros(dim, np.float64), np.zeros(dim, bool)
    for r in range(size):
        idx, val = sparse_input(name, r, dim, density, dtype)
        np.add.at(dense, idx, val)
        present[idx] = True
    return dense.astype(dtype), present


def test_sparse_allreduce(comm):
    for dtype in DTYPES:
        for dim in [0, 1, 1000, 200000]:
            for density in [0, 0.001, 0.05, 0.7]:
                name = "sparse %s %d %g" % (dtype.__name__, dim, density)
                idx, val = sparse_input(name, comm.rank, dim, density, dtype)
                dense, present = sparse_reference(name, dim, density, dtype, comm.size)
                ri, rv = comm.sparse_allreduce(idx, val, dim)
                assert ri.dtype == np.uint32 and rv.dtype == dtype
                if ri.size == dim and dim > 0 and ri.size != present.sum():
                    np.testing.assert_array_equal(ri, np.arange(dim))  # the dense form
                else:
                    np.testing.assert_array_equal(ri, np.flatnonzero(present), err_msg=name)
                np.testing.assert_array_equal(rv, dense[ri], err_msg=name)
                out = comm.sparse_allreduce(idx, val, dim, dense=True)
                np.testing.assert_array_equal(out, dense, err_msg=name)
                buf = np.empty(dim, dtype)
                assert comm.sparse_allreduce(idx, val, dim, out=buf) is buf
                np.testing.assert_array_equal(buf, dense, err_msg=name)


def test_sparse_allreduce_rows(comm):
    """Row-sparse: each rank's rows are sparse_input's indices, row i's
    value j the entry's value times j+1; the sum against a row reference
    (values never cancel, so every touched row, and no other, comes back)."""
    width = 6
    for dtype in DTYPES:
        for rows in [1, 1000, 20000]:
            for density in [0, 0.01, 0.8]:
                name = "rows %s %d %g" % (dtype.__name__, rows, density)
                idx, val = sparse_input(name, comm.rank, rows, density, dtype)
                idx, inverse = np.unique(idx, return_inverse=True)  # rows must be sorted and unique
                summed = np.zeros(idx.size, dtype)
                np.add.at(summed, inverse, val)
                mine = np.outer(summed, np.arange(1, width + 1)).astype(dtype)
                dense, present = sparse_reference(name, rows, density, dtype, comm.size)
                req = comm.start_sparse_allreduce_rows(idx, mine, rows)
                ri, rv = comm.sparse_allreduce_rows(idx, mine, rows)
                assert ri.dtype == np.uint32 and rv.dtype == dtype and rv.shape == (ri.size, width)
                np.testing.assert_array_equal(ri, np.flatnonzero(present), err_msg=name)
                np.testing.assert_array_equal(rv, np.outer(dense[ri], np.arange(1, width + 1)).astype(dtype), err_msg=name)
                si, sv = req.wait()
                np.testing.assert_array_equal(si, ri)
                np.testing.assert_array_equal(sv, rv)


def test_sparse_sorted_input_is_used_in_place(comm):
    idx = np.array([comm.rank, 10 + comm.rank], dtype=np.uint32)
    val = np.array([1.0, 2.0], dtype=np.float32)
    ri, rv = comm.sparse_allreduce(idx, val, 100)
    np.testing.assert_array_equal(ri, sorted(list(range(comm.size)) + [10 + r for r in range(comm.size)]))
    np.testing.assert_array_equal(rv, [1.0] * comm.size + [2.0] * comm.size)


def test_nonblocking(comm):
    sizes = [1, 1000, 70000, 300001]
    arrays = [small_ints("nb %d" % n, comm.rank, n, np.float32) for n in sizes]
    reqs = [comm.start_allreduce(a, op="avg") for a in arrays]
    sidx, sval = sparse_input("nb sparse", comm.rank, 5000, 0.01, np.float64)
    reqs.append(comm.start_sparse_allreduce(sidx, sval, 5000))
    reqs.append(comm.start_sparse_allreduce(sidx, sval, 5000, dense=True))
    bsend = small_ints("nb bc", 0, 100, np.float64) if comm.rank == 0 else np.zeros(100)
    reqs.append(comm.start_broadcast(bsend, root=0))
    reqs.append(comm.start_barrier())
    results = [None] * len(reqs)
    for i in reversed(range(len(reqs))):
        if i % 2:
            while not reqs[i].test():
                time.sleep(0.001)
            results[i] = reqs[i].wait()
        else:
            results[i] = reqs[i].wait(timeout=60)
        assert reqs[i].done
    for n, a, res in zip(sizes, arrays, results):
        assert res is a
        np.testing.assert_array_equal(a, reference("nb %d" % n, n, np.float32, "avg", comm.size))
    dense, present = sparse_reference("nb sparse", 5000, 0.01, np.float64, comm.size)
    ri, rv = results[len(sizes)]
    np.testing.assert_array_equal(rv, dense[ri])
    np.testing.assert_array_equal(results[len(sizes) + 1], dense)
    np.testing.assert_array_equal(bsend, small_ints("nb bc", 0, 100, np.float64))


def test_wait_timeout(comm):
    # The barrier cannot complete before rank 0 starts it.
    if comm.rank == 0:
        time.sleep(0.3)
    req = comm.start_barrier()
    if comm.rank != 0:
        try:
            req.wait(timeout=0.02)
        except sparcml.NotDone as e:
            assert e.op == "barrier" and e.rank == comm.rank and isinstance(e, TimeoutError)
        else:
            raise AssertionError("a barrier completed before rank 0 entered it")
        assert not req.test() and not req.done
    req.wait(timeout=30)
    assert req.test() and req.done


def test_dropped_request_is_waited_for(comm):
    a = np.ones(100000, dtype=np.float32)
    req = comm.start_allreduce(a)
    del req  # the finalizer waits: the buffer is never freed under the operation
    assert (a == comm.size).all()


def test_bad_dtype(comm):
    bad = 1
    a = np.ones(10, np.int32 if comm.rank == bad else np.float32)
    expect_raises(comm, lambda: comm.allreduce(a), bad, sparcml.InvalidArgument, "allreduce")
    h = np.ones(10, np.float16 if comm.rank == bad else np.float32)
    expect_raises(comm, lambda: comm.allreduce(h), bad, sparcml.InvalidArgument, "allreduce")
    b = np.ones(10, ">f4" if comm.rank == bad else "<f4")
    expect_raises(comm, lambda: comm.allreduce(b), bad, sparcml.InvalidArgument, "allreduce")
    c = [1.0] * 10 if comm.rank == bad else np.ones(10)
    expect_raises(comm, lambda: comm.allreduce(c), bad, sparcml.InvalidArgument, "allreduce")


def test_bad_layout(comm):
    bad = comm.size - 1
    base = np.ones(20, np.float32)
    a = base[::2] if comm.rank == bad else base[:10]
    expect_raises(comm, lambda: comm.allreduce(a), bad, sparcml.InvalidArgument, "allreduce")
    f = np.ones((4, 5), np.float64, order="F" if comm.rank == bad else "C")
    expect_raises(comm, lambda: comm.allreduce(f), bad, sparcml.InvalidArgument, "allreduce")
    ro = np.ones(10, np.float32)
    if comm.rank == bad:
        ro.flags.writeable = False
    expect_raises(comm, lambda: comm.allreduce(ro), bad, sparcml.InvalidArgument, "allreduce")
    expect_raises(comm, lambda: comm.allreduce(np.ones(3), op="prod" if comm.rank == bad else "sum"),
                  bad, sparcml.InvalidArgument, "allreduce")


def test_mismatches(comm):
    bad = 1
    expect_raises(comm, lambda: comm.allreduce(np.ones(9 if comm.rank == bad else 10, np.float32)),
                  bad, sparcml.Mismatch, "allreduce")
    expect_raises(comm, lambda: comm.allreduce(np.ones(10, np.float64 if comm.rank == bad else np.float32)),
                  bad, sparcml.Mismatch, "allreduce")
    expect_raises(comm, lambda: comm.allreduce(np.ones(10), op="max" if comm.rank == bad else "sum"),
                  bad, sparcml.Mismatch, "allreduce")
    expect_raises(comm, lambda: comm.allgather(np.ones(3 if comm.rank == bad else 4)),
                  bad, sparcml.Mismatch, "allgather")
    err = expect_raises(comm, lambda: comm.sparse_allreduce(np.array([1, 2]), np.ones(2), 50 if comm.rank == bad else 100),
                        bad, sparcml.Mismatch, "sparse-allreduce")
    assert isinstance(err, (sparcml.Mismatch, sparcml.Aborted))


def test_bad_sparse(comm):
    bad = 1
    idx = np.array([1, 200] if comm.rank == bad else [1, 2])
    expect_raises(comm, lambda: comm.sparse_allreduce(idx, np.ones(2), 100), bad,
                  sparcml.InvalidArgument, "sparse-allreduce")
    val = np.ones(2, np.int64 if comm.rank == bad else np.float64)
    expect_raises(comm, lambda: comm.sparse_allreduce(np.array([1, 2]), val, 100), bad,
                  sparcml.InvalidArgument, "sparse-allreduce")
    val = np.ones(3 if comm.rank == bad else 2)
    expect_raises(comm, lambda: comm.sparse_allreduce(np.array([1, 2]), val, 100), bad,
                  sparcml.InvalidArgument, "sparse-allreduce")
    out = np.empty(99 if comm.rank == bad else 100)
    expect_raises(comm, lambda: comm.sparse_allreduce(np.array([1, 2]), np.ones(2), 100, out=out), bad,
                  sparcml.InvalidArgument, "sparse-allreduce")


def test_bad_start(comm):
    bad = 1
    a = np.ones(10, np.int32 if comm.rank == bad else np.float32)
    expect_raises(comm, lambda: comm.start_allreduce(a).wait(30), bad, sparcml.InvalidArgument, "allreduce")


def test_fail(comm):
    bad = 1
    err = expect_raises(comm, lambda: comm.fail("allreduce", "the model diverged") if comm.rank == bad
                        else comm.allreduce(np.ones(4)), bad, sparcml.InvalidArgument, "allreduce")
    assert "the model diverged" in str(err)


def test_errors_are_exceptions_of_their_kind(comm):
    assert issubclass(sparcml.Timeout, TimeoutError) and issubclass(sparcml.NotDone, TimeoutError)
    assert issubclass(sparcml.InvalidArgument, ValueError) and issubclass(sparcml.PeerLost, ConnectionError)
    check_usable(comm)


def abort_last_rank(comm):
    """After the agreement: the last rank aborts; the others' next
    operation fails naming it, instead of hanging."""
    bad = comm.size - 1
    if comm.rank == bad:
        # Abort resets the connections, so data this rank already sent but
        # a peer has not read yet can be lost: give the others time to
        # finish reading the previous operation.
        time.sleep(2)
        comm.abort("the test aborts this rank")
        try:
            comm.allreduce(np.ones(4))
        except sparcml.Aborted:
            return
        raise AssertionError("allreduce after abort did not raise Aborted")
    try:
        comm.allreduce(np.ones(4))
    except (sparcml.PeerLost, sparcml.Aborted) as e:
        assert "rank %d" % bad in str(e), str(e)
    else:
        raise AssertionError("allreduce with an aborted peer did not raise")


def closed_after_finalize(comm):
    comm.finalize()
    comm.finalize()  # idempotent
    try:
        comm.allreduce(np.ones(1))
    except sparcml.Closed:
        pass
    else:
        raise AssertionError("allreduce after finalize did not raise Closed")


def test_split_and_p2p(comm):
    """Comm.split (sparcml_comm_split): the even and the odd ranks, ranked
    in reverse; start_send/start_recv (a ring) and set_timeout."""
    sub = comm.split(comm.rank % 2, key=-comm.rank)
    members = [r for r in range(comm.size) if r % 2 == comm.rank % 2]
    assert sub.size == len(members) and sub.rank == sorted(members, reverse=True).index(comm.rank), sub
    x = np.array([float(comm.rank)])
    sub.allreduce(x)
    assert x[0] == sum(members), (x, members)
    sub.finalize()
    assert comm.split(-1) is None
    comm.set_timeout(30)
    if comm.size > 1:
        nxt, prv = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
        got = np.empty(5, dtype=np.float64)
        r = comm.start_recv(got, prv)
        s = comm.start_send(np.full(5, comm.rank, dtype=np.float64), nxt)
        s.wait(30)
        assert (r.wait(30) == prv).all(), got
    comm.set_timeout(None)


if __name__ == "__main__":
    run([test_split_and_p2p, test_init, test_allreduce, test_allreduce_views_and_shapes, test_allreduce_random_floats,
         test_reduce_scatter, test_allgather, test_allgatherv, test_broadcast_and_barrier,
         test_sparse_allreduce, test_sparse_allreduce_rows, test_sparse_sorted_input_is_used_in_place, test_nonblocking,
         test_wait_timeout, test_dropped_request_is_waited_for, test_bad_dtype, test_bad_layout,
         test_mismatches, test_bad_sparse, test_bad_start, test_fail, test_errors_are_exceptions_of_their_kind],
        after=[abort_last_rank])
