"""Tests of sparcml.torch, run on every rank:

    sparcml run -n 3 --timeout 5m -- /usr/bin/python3 python/tests/ranks/torch_hooks.py

DDP with allreduce_hook against DDP's default (gloo) reduction and against
one process training on the whole batch; topk_hook at density 1 against the
default, and at 10% with error feedback against the default's accuracy; allreduce_sparse against the
dense sum of every rank's embedding gradient, computed here.
"""

import copy

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml
import sparcml.torch as st
from harness import expect_raises, run

torch.set_num_threads(1)
STEPS, BATCH = 6, 8


def make_model():
    torch.manual_seed(0)  # the same initial weights on every rank
    return nn.Sequential(nn.Linear(20, 64), nn.Tanh(), nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 5))


def batch(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(BATCH, 20, generator=g), torch.randint(0, 5, (BATCH,), generator=g)


def train(model, steps, ranks):
    """SGD with momentum on the batches of ranks (the DDP rank's own, or
    every rank's concatenated for the one-process reference)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        xs, ys = zip(*(batch(step, r) for r in ranks))
        opt.zero_grad()
        nn.functional.cross_entropy(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def identical_on_every_rank(comm, params):
    flat = torch.cat([p.reshape(-1) for p in params]).numpy()
    gathered = comm.allgather(np.ascontiguousarray(flat)).reshape(comm.size, -1)
    return all(np.array_equal(gathered[0], gathered[r]) for r in range(comm.size))


def test_allreduce_hook_equals_ddp_default(comm):
    assert st.init_process_group() is comm
    assert dist.get_rank() == comm.rank and dist.get_world_size() == comm.size
    base = make_model()
    default = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)  # several buckets per step
    hooked = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    hooked.register_comm_hook(None, st.allreduce_hook)
    explicit = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    explicit.register_comm_hook(comm, st.allreduce_hook)
    want = train(default, STEPS, [comm.rank])
    got = train(hooked, STEPS, [comm.rank])
    got_explicit = train(explicit, STEPS, [comm.rank])
    # One process on the whole batch: its gradient is the ranks' average.
    alone = train(copy.deepcopy(base), STEPS, range(comm.size))
    for w, g, e, a in zip(want, got, got_explicit, alone):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(e, w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(g, a, rtol=1e-4, atol=1e-5)
    assert not all(torch.equal(p0, p) for p0, p in zip(base.parameters(), got)), "training changed nothing"
    assert identical_on_every_rank(comm, got), "ranks hold different parameters"
    assert st.default_comm().rank == dist.get_rank() and st.default_comm().size == dist.get_world_size()


def test_topk_hook_density_one_equals_ddp_default(comm):
    """Density 1 sends everything: after the dense start the steps are the
    default's, to float tolerance (error feedback keeps nothing), with the
    gradients copied into the buckets or living in them."""
    base = make_model()
    default = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    hooked = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    state = st.TopkState(density=1.0)
    hooked.register_comm_hook(state, st.topk_hook)
    # With gradient_as_bucket_view the bucket is the gradients' own memory,
    # which the hook overwrites in place.
    viewed = DDP(copy.deepcopy(base), bucket_cap_mb=0.005, gradient_as_bucket_view=True)
    viewed_state = st.TopkState(density=1.0)
    viewed.register_comm_hook(viewed_state, st.topk_hook)
    want = train(default, STEPS, [comm.rank])
    got = train(hooked, STEPS, [comm.rank])
    got_viewed = train(viewed, STEPS, [comm.rank])
    for w, g, v in zip(want, got, got_viewed):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v, w, rtol=1e-5, atol=1e-6)
    assert viewed_state.iter == STEPS and viewed_state.compressors
    assert state.iter == STEPS and state.compressors, (state.iter, len(state.compressors))
    assert all(not c.residual().any() for c in state.compressors.values())
    assert identical_on_every_rank(comm, got), "ranks hold different parameters"


def teacher_data(n, seed):
    """A classification task a small MLP learns to a plateau in a few
    hundred steps: labels of a fixed random linear teacher on Gaussian
    inputs."""
    w = torch.randn(20, 5, generator=torch.Generator().manual_seed(12345))
    x = torch.randn(n, 20, generator=torch.Generator().manual_seed(seed))
    return x, (x @ w).argmax(1)


def train_mlp(ddp, steps, rank, size, batch=32):
    x, y = teacher_data(steps * batch * size, 1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        lo = (s * size + rank) * batch
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x[lo:lo + batch]), y[lo:lo + batch]).backward()
        opt.step()
    xt, yt = teacher_data(20000, 2)
    with torch.no_grad():
        return (ddp.module(xt).argmax(1) == yt).float().mean().item()


def test_topk_hook_reaches_default_accuracy(comm):
    """Top 10% with error feedback: the MLP reaches DDP's default accuracy
    within one point, and every rank ends with the same parameters."""
    base = make_model()
    default = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    hooked = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    state = st.TopkState(density=0.1, error_feedback=True)
    hooked.register_comm_hook(state, st.topk_hook)
    steps = 400
    want = train_mlp(default, steps, comm.rank, comm.size)
    got = train_mlp(hooked, steps, comm.rank, comm.size)
    if comm.rank == 0:
        print("topk_hook 10%%: accuracy %.4f, DDP default %.4f (%d steps, rate %.1f)" % (
            got, want, steps, state.compression_stats()[0]), flush=True)
    assert want > 0.6, "the default did not learn the task (accuracy %.3f)" % want
    assert got >= want - 0.01, "top-k accuracy %.4f, default %.4f" % (got, want)
    assert 9 < state.compression_stats()[0] <= 10, state.compression_stats()
    assert identical_on_every_rank(comm, [p.detach() for p in hooked.module.parameters()]), \
        "ranks hold different parameters"


def test_topk_hook_global_scope(comm):
    """TopkState(scope="global"): each bucket keeps about 10% of its summed
    entries, the largest over the ranks; the MLP reaches DDP's default
    accuracy within three points (it keeps a third of what the union of 3
    ranks keeps), and every rank ends with the same parameters."""
    base = make_model()
    default = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    hooked = DDP(copy.deepcopy(base), bucket_cap_mb=0.005)
    state = st.TopkState(density=0.1, scope="global")
    hooked.register_comm_hook(state, st.topk_hook)
    steps = 400
    want = train_mlp(default, steps, comm.rank, comm.size)
    got = train_mlp(hooked, steps, comm.rank, comm.size)
    if comm.rank == 0:
        print("topk_hook 10%% global: accuracy %.4f, DDP default %.4f (%d steps)" % (got, want, steps), flush=True)
    assert want > 0.6, "the default did not learn the task (accuracy %.3f)" % want
    assert got >= want - 0.03, "global top-k accuracy %.4f, default %.4f" % (got, want)
    assert all(c.scope == "global" for c in state.compressors.values())
    assert identical_on_every_rank(comm, [p.detach() for p in hooked.module.parameters()]), \
        "ranks hold different parameters"
    try:
        st.TopkState(scope="local")
    except ValueError:
        pass
    else:
        raise AssertionError("TopkState accepted scope='local'")


def test_topk_hook_bad_bucket(comm):
    """A float16 model on one rank: the hook fails on every rank."""
    bad = 1
    torch.manual_seed(0)
    model = nn.Linear(8, 4)
    if comm.rank == bad:
        model = model.half()
    # DDP's own set-up would compare the ranks' parameters over gloo; the
    # hook is called as DDP would, with a bucket-like object.
    class Bucket:
        def __init__(self, t):
            self.t = t

        def buffer(self):
            return self.t

        def index(self):
            return 0

        def is_last(self):
            return True
    state = st.TopkState(density=0.5, start_iter=2)
    state.iter = 2
    grad = torch.ones(36, dtype=torch.float16 if comm.rank == bad else torch.float32)
    expect_raises(comm, lambda: st.topk_hook(state, Bucket(grad)), bad, sparcml.InvalidArgument,
                  "compressor-create")
    ok = torch.ones(36)
    st.topk_hook(state, Bucket(ok)).wait()  # the state is usable: it creates the compressor now (the hook is asynchronous)
    torch.testing.assert_close(ok, torch.ones(36) * (torch.arange(36) < 18).float())
    try:
        st.TopkState(density=0.1, start_iter=1)
    except ValueError:
        pass
    else:
        raise AssertionError("start_iter 1 with error feedback accepted")


def embedding_grad(rank, rows=1000, dim=16, touched=50, dtype=torch.float32):
    """The sparse gradient of an embedding lookup on rank's seeded batch
    (indices with repeats, unsorted)."""
    torch.manual_seed(7)
    emb = nn.Embedding(rows, dim, sparse=True).to(dtype)
    g = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, rows, (touched,), generator=g)
    w = torch.randn(touched, dim, generator=g, dtype=dtype)
    (emb(idx) * w).sum().backward()
    return emb.weight.grad


def test_allreduce_sparse_embedding(comm):
    for dtype, touched in [(torch.float32, 50), (torch.float64, 50), (torch.float32, 0), (torch.float32, 5000)]:
        # touched 0 on rank 1 only: a rank may bring nothing; 5000 makes the sum dense.
        t = 0 if touched == 0 and comm.rank == 1 else (touched or 50)
        grad = embedding_grad(comm.rank, touched=t, dtype=dtype)
        got = st.allreduce_sparse(grad)
        assert grad.is_sparse and (t == 0 or not grad.is_coalesced())
        ranks_touched = [0 if touched == 0 and r == 1 else (touched or 50) for r in range(comm.size)]
        want = sum(embedding_grad(r, touched=n, dtype=dtype).to_dense() for r, n in enumerate(ranks_touched))
        assert got.is_sparse and got.is_coalesced() and got.shape == want.shape and got.dtype == dtype
        torch.testing.assert_close(got.to_dense(), want)
        # Only rows someone touched come back.
        rows = set(got.indices()[0].tolist())
        touched_rows = set(torch.nonzero(want.abs().sum(1)).reshape(-1).tolist())
        assert touched_rows <= rows, "rows missing"
        assert got.values().ne(0).any(1).all(), "an all-zero row came back"
        avg = st.allreduce_sparse(grad, average=True)
        torch.testing.assert_close(avg.to_dense(), want / comm.size)


def test_allreduce_sparse_2d_sparse_dims(comm):
    g = torch.Generator().manual_seed(comm.rank)
    idx = torch.stack([torch.randint(0, 30, (40,), generator=g), torch.randint(0, 7, (40,), generator=g)])
    t = torch.sparse_coo_tensor(idx, torch.randn(40, generator=g, dtype=torch.float64), (30, 7))
    want = torch.zeros(30, 7, dtype=torch.float64)
    for r in range(comm.size):
        gr = torch.Generator().manual_seed(r)
        ir = torch.stack([torch.randint(0, 30, (40,), generator=gr), torch.randint(0, 7, (40,), generator=gr)])
        want += torch.sparse_coo_tensor(ir, torch.randn(40, generator=gr, dtype=torch.float64), (30, 7)).to_dense()
    torch.testing.assert_close(st.allreduce_sparse(t).to_dense(), want)


def test_allreduce_tensor(comm):
    x = torch.arange(10, dtype=torch.float32) * (comm.rank + 1)
    st.allreduce(x, op="max")
    torch.testing.assert_close(x, torch.arange(10, dtype=torch.float32) * comm.size)


def test_bad_tensors(comm):
    bad = 1
    t = torch.ones(8, dtype=torch.float16 if comm.rank == bad else torch.float32)
    expect_raises(comm, lambda: st.allreduce(t), bad, sparcml.InvalidArgument, "allreduce")
    u = torch.ones(4, 4)[:, 0] if comm.rank == bad else torch.ones(4)
    expect_raises(comm, lambda: st.allreduce(u), bad, sparcml.InvalidArgument, "allreduce")
    grad = embedding_grad(comm.rank)
    arg = grad.to_dense() if comm.rank == bad else grad
    expect_raises(comm, lambda: st.allreduce_sparse(arg), bad, sparcml.InvalidArgument, "sparse-allreduce")
    other = torch.sparse_coo_tensor(torch.zeros(2, 1, dtype=torch.long), torch.ones(1), (999, 16)) \
        if comm.rank == bad else grad
    expect_raises(comm, lambda: st.allreduce_sparse(other), bad, sparcml.Mismatch, "sparse-allreduce")


if __name__ == "__main__":
    run([test_allreduce_hook_equals_ddp_default, test_topk_hook_density_one_equals_ddp_default,
         test_topk_hook_reaches_default_accuracy, test_topk_hook_global_scope, test_topk_hook_bad_bucket,
         test_allreduce_sparse_embedding,
         test_allreduce_sparse_2d_sparse_dims, test_allreduce_tensor, test_bad_tensors])
