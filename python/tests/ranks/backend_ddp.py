"""DDP on the "sparcml" backend ends with the parameters DDP on gloo ends
with, after the same seeded steps: a dense model (DDP's own reduction, and
sparcml.torch's allreduce_hook and topk_hook at density 1), and a
sparse-embedding model whose last rank's batches hold only padding ids.

    sparcml run -n 3 -- python python/tests/ranks/backend_ddp.py
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml.torch as st

torch.set_num_threads(1)
STEPS = 5


class Dense(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 4))

    def forward(self, x):
        return self.net(x)


class Recommender(nn.Module):
    """An embedding table with sparse gradients, then a dense head."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(200, 8, sparse=True, padding_idx=0)
        self.head = nn.Linear(8, 1)

    def forward(self, ids):
        return self.head(self.emb(ids).mean(1)).squeeze(1)


def dense_batch(step, rank):
    g = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)


def ids_batch(step, rank, size):
    g = torch.Generator().manual_seed(100 * step + rank)
    if rank == size - 1:
        return torch.zeros(8, 5, dtype=torch.long), torch.randn(8, generator=g)  # only padding
    return torch.randint(1, 200, (8, 5), generator=g), torch.randn(8, generator=g)


def train(model, group, sparse, hook=None, state=None):
    ddp = DDP(copy.deepcopy(model), process_group=group)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    rank, size = dist.get_rank(), dist.get_world_size()
    for step in range(STEPS):
        opt.zero_grad()
        if sparse:
            x, y = ids_batch(step, rank, size)
            loss = nn.functional.mse_loss(ddp(x), y)
        else:
            x, y = dense_batch(step, rank)
            loss = nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in ddp.module.parameters()]


def same(a, b, what):
    for i, (x, y) in enumerate(zip(a, b)):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-6, msg=lambda m, i=i: "%s, parameter %d: %s" % (what, i, m))


if __name__ == "__main__":
    dist.init_process_group("sparcml")
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    dense = Dense()
    want = train(dense, gloo, False)
    assert not all(torch.equal(p, q) for p, q in zip(dense.parameters(), want)), "training changed nothing"
    same(train(dense, None, False), want, "dense, DDP's reduction on sparcml")
    same(train(dense, None, False, st.allreduce_hook), want, "dense, allreduce_hook on sparcml")
    same(train(dense, gloo, False, st.allreduce_hook), want, "dense, allreduce_hook beside gloo")
    same(train(dense, None, False, st.topk_hook, st.TopkState(density=1.0)), want, "dense, topk_hook at density 1")
    torch.manual_seed(0)
    rec = Recommender()
    want = train(rec, gloo, True)
    same(train(rec, None, True), want, "sparse embedding, DDP's reduction on sparcml")
    dist.barrier()
    if dist.get_rank() == 0:
        print("backend_ddp: DDP on sparcml equals DDP on gloo (dense, hooks, sparse embedding)")
    dist.destroy_process_group()
