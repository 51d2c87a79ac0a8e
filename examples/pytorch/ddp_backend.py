"""DDP on the "sparcml" torch.distributed backend: no gloo group, no hook.

    make build lib && make deps-python
    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python examples/pytorch/ddp_backend.py
    torchrun --nproc-per-node 4 examples/pytorch/ddp_backend.py      # with sparcml installed

A small MLP on a synthetic regression task; every rank trains on its own
seeded batches, DDP averages the gradients through sparcml, and at the end
the ranks check that they hold identical parameters.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml.torch as st  # registers the "sparcml" backend


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--hook", choices=["none", "allreduce", "topk"], default="none")
    args = ap.parse_args()

    dist.init_process_group("sparcml")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1)))
    if args.hook == "allreduce":
        model.register_comm_hook(None, st.allreduce_hook)
    elif args.hook == "topk":
        model.register_comm_hook(st.TopkState(density=0.1), st.topk_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    w = torch.randn(32, 1, generator=torch.Generator().manual_seed(1))
    for step in range(args.steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(64, 32, generator=g)
        loss = nn.functional.mse_loss(model(x), x @ w)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0 and step % 10 == 0:
            print("step %d loss %.4f" % (step, loss.item()), flush=True)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lo, hi = flat.clone(), flat.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    assert torch.equal(lo, hi), "the ranks hold different parameters"
    if rank == 0:
        print("%d ranks hold identical parameters after %d steps" % (size, args.steps))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
