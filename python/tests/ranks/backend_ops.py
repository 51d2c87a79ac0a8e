"""Every operation of the "sparcml" torch.distributed backend, on every
rank, against a reference computed here from every rank's seeded input.

    sparcml run -n 3 -- python python/tests/ranks/backend_ops.py

torch.distributed is initialized from the launcher's variables (env://);
python/tests/test_backend.py also runs it under torchrun and with an
explicit init_method or store (argv[1] = "tcp://..." or "store:host:port").
"""

import os
import sys
import zlib

import torch
import torch.distributed as dist

import sparcml
import sparcml.torch  # noqa: F401 - registers the backend

torch.set_num_threads(1)
R = dist.ReduceOp


def init():
    how = sys.argv[1] if len(sys.argv) > 1 else "env"
    if how.startswith("tcp://"):
        dist.init_process_group("sparcml", init_method=how, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    elif how.startswith("store:"):
        _, host, port = how.split(":")
        rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store = dist.TCPStore(host, int(port), size, is_master=rank == 0)
        dist.init_process_group("sparcml", store=store, rank=rank, world_size=size)
    else:
        dist.init_process_group("sparcml")
    assert dist.get_backend() == "sparcml"


def data(name, rank, shape, dtype, lo=-8, hi=9):
    """Rank rank's input to test name: small integers, so that sums are
    exact in any order."""
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) * 1000 + rank)
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


def reduce_ref(xs, op):
    acc = xs[0].double()
    for x in xs[1:]:
        x = x.double()
        acc = {R.SUM: acc + x, R.AVG: acc + x, R.PRODUCT: acc * x, R.MIN: torch.minimum(acc, x),
               R.MAX: torch.maximum(acc, x)}[op]
    return acc / len(xs) if op == R.AVG else acc


FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.uint8]


def test_all_reduce(rank, size):
    for dtype in FLOATS + INTS:
        for op in (R.SUM, R.AVG, R.MIN, R.MAX, R.PRODUCT):
            if op == R.AVG and dtype in INTS:
                continue
            name = "ar %s %s" % (dtype, op)
            lo, hi = ((-2, 3) if op == R.PRODUCT else (-8, 9)) if dtype != torch.uint8 else (0, 3)
            shape = (4, 5) if dtype != torch.uint8 else (7,)
            t = data(name, rank, shape, dtype, lo, hi)
            dist.all_reduce(t, op=op)
            want = reduce_ref([data(name, r, shape, dtype, lo, hi) for r in range(size)], op).to(dtype)
            torch.testing.assert_close(t, want, msg=lambda m, name=name: "%s: %s" % (name, m))
    # Non-contiguous: the result lands in the caller's strided view.
    base = data("nc", rank, (6, 4), torch.float32)
    view = base[:, 1]
    dist.all_reduce(view)
    want = sum(data("nc", r, (6, 4), torch.float32)[:, 1] for r in range(size))
    torch.testing.assert_close(base[:, 1], want)
    # 16-bit random floats: reduced in float32, rounded once.
    x = torch.randn(1000, generator=torch.Generator().manual_seed(rank)).to(torch.bfloat16)
    dist.all_reduce(x)
    ref = sum(torch.randn(1000, generator=torch.Generator().manual_seed(r)).to(torch.bfloat16).float()
              for r in range(size)).to(torch.bfloat16)
    torch.testing.assert_close(x, ref, rtol=0, atol=0)


def test_all_reduce_coalesced(rank, size):
    ts = [data("co%d" % i, rank, (i + 3,), torch.float32) for i in range(3)]
    dist.all_reduce_coalesced(ts)
    for i, t in enumerate(ts):
        torch.testing.assert_close(t, sum(data("co%d" % i, r, (i + 3,), torch.float32) for r in range(size)))


def test_all_gather(rank, size):
    for dtype in (torch.float32, torch.int64, torch.uint8, torch.bfloat16):
        mine = data("ag %s" % dtype, rank, (5,), dtype, 0, 9)
        out = [torch.empty(5, dtype=dtype) for _ in range(size)]
        dist.all_gather(out, mine)
        for r in range(size):
            assert torch.equal(out[r], data("ag %s" % dtype, r, (5,), dtype, 0, 9)), (dtype, r)
        flat = torch.empty(5 * size, dtype=dtype)
        dist.all_gather_into_tensor(flat, mine)
        assert torch.equal(flat, torch.cat([data("ag %s" % dtype, r, (5,), dtype, 0, 9) for r in range(size)]))


def test_reduce_scatter(rank, size):
    for dtype, op in ((torch.float32, R.SUM), (torch.float64, R.MAX), (torch.bfloat16, R.SUM), (torch.int64, R.PRODUCT)):
        lo, hi = (-2, 3) if op == R.PRODUCT else (-8, 9)
        name = "rs %s" % dtype
        full = [data(name, r, (3 * size,), dtype, lo, hi) for r in range(size)]
        want = reduce_ref(full, op).to(dtype)[3 * rank:3 * rank + 3]
        out = torch.empty(3, dtype=dtype)
        dist.reduce_scatter_tensor(out, full[rank], op=op)
        torch.testing.assert_close(out, want)
        out2 = torch.empty(3, dtype=dtype)
        dist.reduce_scatter(out2, list(full[rank].chunk(size)), op=op)
        torch.testing.assert_close(out2, want)


def test_broadcast_barrier(rank, size):
    for root in {0, size - 1}:
        for dtype in (torch.float64, torch.uint8, torch.int32):
            t = data("bc %d %s" % (root, dtype), rank, (7,), dtype, 0, 9)
            dist.broadcast(t, src=root)
            assert torch.equal(t, data("bc %d %s" % (root, dtype), root, (7,), dtype, 0, 9))
    dist.barrier()


def test_reduce(rank, size):
    t = data("reduce", rank, (4,), torch.float32)
    dist.reduce(t, dst=0)
    if rank == 0:
        torch.testing.assert_close(t, sum(data("reduce", r, (4,), torch.float32) for r in range(size)))


def test_send_recv(rank, size):
    if size == 1:
        return
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for dtype in (torch.float32, torch.int16):
        s = dist.isend(data("p2p %s" % dtype, rank, (9,), dtype), nxt)
        got = torch.empty(9, dtype=dtype)
        dist.recv(got, prv)
        s.wait()
        assert torch.equal(got, data("p2p %s" % dtype, prv, (9,), dtype))


def test_all_to_all(rank, size):
    # Rank r sends r + p + 1 rows to rank p.
    ins = [data("a2a %d>%d" % (rank, p), rank, (rank + p + 1, 2), torch.float64) for p in range(size)]
    out = torch.empty(sum(r + rank + 1 for r in range(size)), 2, dtype=torch.float64)
    dist.all_to_all_single(out, torch.cat(ins), [r + rank + 1 for r in range(size)], [rank + p + 1 for p in range(size)])
    want = torch.cat([data("a2a %d>%d" % (r, rank), r, (r + rank + 1, 2), torch.float64) for r in range(size)])
    assert torch.equal(out, want)
    outs = [torch.empty(3, dtype=torch.int64) for _ in range(size)]
    dist.all_to_all(outs, [data("a2al %d>%d" % (rank, p), rank, (3,), torch.int64) for p in range(size)])
    for r in range(size):
        assert torch.equal(outs[r], data("a2al %d>%d" % (r, rank), r, (3,), torch.int64))


def test_gather_scatter(rank, size):
    root = size - 1
    mine = data("gather", rank, (4,), torch.float32)
    outs = [torch.empty(4) for _ in range(size)] if rank == root else None
    dist.gather(mine, outs, dst=root)
    if rank == root:
        for r in range(size):
            assert torch.equal(outs[r], data("gather", r, (4,), torch.float32))
    got = torch.empty(4, dtype=torch.int64)
    dist.scatter(got, [data("scatter %d" % p, root, (4,), torch.int64) for p in range(size)] if rank == root else None,
                 src=root)
    assert torch.equal(got, data("scatter %d" % rank, root, (4,), torch.int64))


def test_coalescing_manager(rank, size):
    from torch.distributed.distributed_c10d import _coalescing_manager
    ins = [data("cm%d" % i, rank, (3,), torch.float32) for i in range(2)]
    outs = [torch.empty(3 * size) for _ in range(2)]
    with _coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    for k in range(2):
        assert torch.equal(outs[k], torch.cat([data("cm%d" % k, r, (3,), torch.float32) for r in range(size)]))
    rs = [torch.empty(1) for _ in range(2)]
    with _coalescing_manager(async_ops=True) as cm:
        for o, i in zip(rs, ins):
            dist.reduce_scatter_tensor(o, i[:size] if size <= 3 else i)
    cm.wait()


def sparse_grad(rank, name, rows, d):
    """Rank rank's embedding-style gradient: some rows of a rows x d table
    (rank 0 brings none)."""
    if rank == 0:
        return torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, d), (rows, d))
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) + rank)
    idx = torch.randint(0, rows, (6,), generator=g)  # repeats are summed
    return torch.sparse_coo_tensor(idx[None], torch.randint(-4, 5, (6, d), generator=g).float(), (rows, d))


def test_sparse_all_reduce(rank, size):
    done = []
    for op in (R.SUM, R.AVG):
        s = sparse_grad(rank, "sp", 50, 8)
        dist.all_reduce(s, op=op)
        want = sum(sparse_grad(r, "sp", 50, 8).to_dense() for r in range(size))
        if op == R.AVG:
            want = want / size
        assert s.is_sparse
        torch.testing.assert_close(s.to_dense(), want)
        assert (s.coalesce().values().abs().sum(1) > 0).all() or s._nnz() == 0, "an all-zero row came back"
        done.append((s, want))
    # Each result is the tensor's own: a later call, which reuses the
    # library's result memory, leaves the earlier result as it was.
    for s, want in done:
        torch.testing.assert_close(s.to_dense(), want)
    # Rows that cancel: ranks 1 and 2 bring +v and -v on row 7 (and rank 1
    # row 3 alone): row 7 must not come back as a row of zeros.
    v = torch.arange(4.0) + 1
    rows = {1: ([3, 7], torch.stack([v, v])), 2: ([7], -v[None])}.get(rank, ([], torch.zeros(0, 4)))
    s = torch.sparse_coo_tensor(torch.tensor([rows[0]], dtype=torch.long).reshape(1, -1), rows[1], (10, 4))
    dist.all_reduce(s)
    want_rows = {1: [], 2: [3, 7]}.get(size, [3])
    assert s.coalesce().indices()[0].tolist() == want_rows, s
    for i in range(len(want_rows)):
        torch.testing.assert_close(s.coalesce().values()[i], v)


def embedding_grad(rank, name, rows, d, crowd=False):
    """Rank rank's embedding gradient of a rows x d table: power-law row ids
    (rank 0 brings none), or with crowd every row of the first of size
    equal ranges but every 32nd, so that range of the sum goes dense."""
    if rank == 0:
        return torch.sparse_coo_tensor(torch.zeros(1, 0, dtype=torch.long), torch.zeros(0, d), (rows, d))
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) + rank)
    if crowd:
        idx = torch.tensor([i for i in range(rows // dist.get_world_size()) if i % 32], dtype=torch.long)
    else:
        idx = (rows * torch.rand(rows // 10, generator=g) ** 4).long()  # repeats are summed
    return torch.sparse_coo_tensor(idx[None], torch.randn(idx.numel(), d, generator=g), (rows, d))


def test_sparse_all_reduce_vs_gloo(rank, size):
    gloo = dist.new_group(backend="gloo")
    for crowd in (False, True):
        ours = embedding_grad(rank, "emb", 3000, 8, crowd)
        theirs = embedding_grad(rank, "emb", 3000, 8, crowd)
        dist.all_reduce(ours)
        dist.all_reduce(theirs, group=gloo)
        ours, theirs = ours.coalesce(), theirs.coalesce()
        assert ours.is_sparse and (ours.values().ne(0).any(1)).all(), "an all-zero row came back"
        nonzero = theirs.values().ne(0).any(1)  # gloo keeps rows that summed to zero: none here
        assert ours.indices().tolist() == theirs.indices()[:, nonzero].tolist(), (crowd, ours.indices(), theirs.indices())
        torch.testing.assert_close(ours.values(), theirs.values()[nonzero])
    # Two sparse dimensions: rows numbered row-major, unravelled back.
    g = torch.Generator().manual_seed(rank)
    idx = torch.stack([torch.randint(0, 20, (15,), generator=g), torch.randint(0, 30, (15,), generator=g)])
    ours = torch.sparse_coo_tensor(idx, torch.randn(15, 4, generator=g), (20, 30, 4))
    theirs = ours.clone()
    dist.all_reduce(ours)
    dist.all_reduce(theirs, group=gloo)
    torch.testing.assert_close(ours.coalesce().indices(), theirs.coalesce().indices())
    torch.testing.assert_close(ours.coalesce().values(), theirs.coalesce().values())
    dist.destroy_process_group(gloo)


def test_async_out_of_order(rank, size):
    ts = [data("async%d" % k, rank, (1000 * (k + 1),), torch.float32) for k in range(5)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    for k in reversed(range(5)):
        works[k].wait()
        torch.testing.assert_close(ts[k], sum(data("async%d" % k, r, (1000 * (k + 1),), torch.float32)
                                              for r in range(size)))
    for k, f in enumerate(futs):
        assert f.wait()[0] is ts[k]


def test_subgroup(rank, size):
    """dist.new_group is a split of the world's communicator (torch calls
    the world backend's perform_nocolor_split on the other ranks); each
    operation on it equals gloo's on a group of the same ranks, same
    inputs. A group made with use_local_synchronization (not joined by the
    others) meets through its store; new_subgroups splits once per group."""
    cpu = torch.device("cpu")
    world = dist.group.WORLD._get_backend(cpu)
    members = [0, size - 1] if size >= 3 else list(range(size))
    g = dist.new_group(members)
    gl = dist.new_group(members, backend="gloo")
    if rank in members:
        assert g._get_backend(cpu).split_from is world, "the subgroup was not split from the world's communicator"
        for op in (R.SUM, R.MAX, R.PRODUCT):
            t, want = data("sub", rank, (5,), torch.float32), data("sub", rank, (5,), torch.float32)
            dist.all_reduce(t, op=op, group=g)
            dist.all_reduce(want, op=op, group=gl)
            torch.testing.assert_close(t, want)
        x = torch.full((2,), float(rank))
        out, want = [torch.empty(2) for _ in members], [torch.empty(2) for _ in members]
        dist.all_gather(out, x, group=g)
        dist.all_gather(want, x, group=gl)
        for o, w in zip(out, want):
            torch.testing.assert_close(o, w)
        b, bw = data("subbc", rank, (3,), torch.float64), data("subbc", rank, (3,), torch.float64)
        dist.broadcast(b, src=members[-1], group=g)
        dist.broadcast(bw, src=members[-1], group=gl)
        torch.testing.assert_close(b, bw)
    if size >= 3:
        pair = [1, 2]
        if rank in pair:
            loc = dist.new_group(pair, use_local_synchronization=True)
            assert loc._get_backend(cpu).split_from is None
            t = data("subloc", rank, (4,), torch.float32)
            dist.all_reduce(t, group=loc)
            torch.testing.assert_close(t, sum(data("subloc", r, (4,), torch.float32) for r in pair))
    mine, _ = dist.new_subgroups(group_size=1)
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, group=mine)
    assert (t == rank).all(), t
    dist.barrier()


def test_bad_input_fails_everywhere(rank, size):
    """A reduction the backend does not have (BAND of floats) on the last
    rank only: every rank raises, naming the operation."""
    bad = size - 1
    t = torch.ones(4)
    try:
        dist.all_reduce(t, op=R.BAND if rank == bad else R.SUM)
    except Exception as e:  # noqa: BLE001 - the type depends on torch's wrapping
        assert "allreduce" in str(e), e
        assert "rank %d" % bad in str(e), e
    else:
        raise AssertionError("rank %d: a bad all_reduce on rank %d did not raise" % (rank, bad))
    # The group is still usable afterwards.
    t = torch.ones(3)
    dist.all_reduce(t)
    assert (t == size).all()


TESTS = [test_all_reduce, test_all_reduce_coalesced, test_all_gather, test_reduce_scatter, test_broadcast_barrier,
         test_reduce, test_send_recv, test_all_to_all, test_gather_scatter, test_coalescing_manager,
         test_sparse_all_reduce, test_sparse_all_reduce_vs_gloo, test_async_out_of_order, test_subgroup, test_bad_input_fails_everywhere]

if __name__ == "__main__":
    init()
    rank, size = dist.get_rank(), dist.get_world_size()
    for t in TESTS:
        t(rank, size)
    dist.barrier()
    if rank == 0:
        print("backend_ops: passed on %d ranks: %s" % (size, " ".join(t.__name__ for t in TESTS)))
    dist.destroy_process_group()
    sparcml.Comm  # noqa: B018 - the package stays imported until exit (its atexit finalizes)
