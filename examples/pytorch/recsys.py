"""A recommendation-style model trained with plain DDP on the "sparcml"
backend: an nn.Embedding(sparse=True) table looked up with power-law
(Zipf-like) ids, so each step touches few rows, mostly the same popular
ones. DDP reduces the table's sparse COO gradient with dist.all_reduce,
which the backend runs as sparcml's sparse allreduce (only touched rows
travel); the dense head goes through the dense allreduce.

    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python examples/pytorch/recsys.py
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml.torch  # noqa: F401 - registers the "sparcml" backend


class Recommender(nn.Module):
    def __init__(self, items, dim):
        super().__init__()
        self.items = nn.Embedding(items, dim, sparse=True, padding_idx=0)
        self.head = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, ids):
        return self.head(self.items(ids).mean(1)).squeeze(1)


def power_law_ids(g, items, shape, alpha=1.2):
    """Item ids in [1, items) with P(id) ~ id^-alpha (0 is padding)."""
    ranks = torch.arange(1, items, dtype=torch.float64)
    return torch.multinomial(ranks.pow(-alpha), shape[0] * shape[1], replacement=True, generator=g).reshape(shape) + 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    args = ap.parse_args()

    dist.init_process_group("sparcml")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(Recommender(args.items, args.dim))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    taste = torch.randn(args.items, generator=torch.Generator().manual_seed(7))  # the hidden preference
    for step in range(args.steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        ids = power_law_ids(g, args.items, (args.batch, 8))
        y = taste[ids].mean(1)
        loss = nn.functional.mse_loss(model(ids), y)
        opt.zero_grad()
        loss.backward()
        if step == 0 and rank == 0:
            grad = model.module.items.weight.grad
            print("embedding gradient: sparse=%s, %d of %d rows touched" % (grad.is_sparse, grad.coalesce()._nnz(),
                                                                            args.items), flush=True)
        opt.step()
        if rank == 0 and step % 10 == 0:
            print("step %d loss %.4f" % (step, loss.item()), flush=True)
    w = model.module.items.weight.detach().reshape(-1).clone()
    hi = w.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    assert torch.equal(w, hi), "the ranks hold different embeddings"
    if rank == 0:
        print("%d ranks hold identical embeddings after %d steps" % (size, args.steps))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
