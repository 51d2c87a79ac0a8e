"""Data-parallel training of a Fashion-MNIST MLP with DDP, its gradients
reduced by sparcml through a communication hook; prints the test accuracy
after every epoch.

    make lib
    PYTHONPATH=python sparcml run -n 4 -- /usr/bin/python3 examples/pytorch/train.py --hook topk --density 0.01

--hook topk sends the top --density of each gradient bucket per step with
error feedback (sparcml.torch.topk_hook, --quant to encode the values);
--hook allreduce is sparcml's dense allreduce; --hook default keeps DDP's
own reduction (the gloo process group), for comparison. The data is Debian's dataset-fashion-mnist. Every rank trains
on its shard of the training set; at the end the ranks check that they
hold identical parameters.
"""

import argparse
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml.torch as st

HOOKS = {"default": None, "allreduce": st.allreduce_hook, "topk": st.topk_hook}


def load_idx(path):
    """An IDX file (big-endian: magic with the number of dimensions in its
    last byte, the dimensions, then unsigned bytes)."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = np.frombuffer(data, dtype=">u4", count=ndim, offset=4)
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split, limit):
    images = load_idx(os.path.join(data_dir, "%s-images-idx3-ubyte.gz" % split))
    labels = load_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte.gz" % split))
    if limit:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return (x - 0.2860) / 0.3530, torch.from_numpy(labels.astype(np.int64))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hook", choices=sorted(HOOKS), default="topk")
    p.add_argument("--density", type=float, default=0.01, help="--hook topk: the fraction of each bucket sent")
    p.add_argument("--quant", choices=["fp16", "bf16", "q8", "q4", "q2"], help="--hook topk: the values' encoding")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--limit", type=int, default=0, help="use only the first N training images (0: all)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    torch.set_num_threads(1)

    comm = st.init_process_group("gloo")  # DDP's set-up; the hook reduces through comm
    rank, size = dist.get_rank(), dist.get_world_size()
    x, y = load(args.data, "train", args.limit)
    xt, yt = load(args.data, "t10k", 0)
    steps = len(x) // size // args.batch_size  # the same on every rank, as DDP requires
    x, y = x[rank::size], y[rank::size]

    torch.manual_seed(0)  # the same initial parameters on every rank
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    ddp = DDP(model)
    state = st.TopkState(density=args.density, quant=args.quant) if args.hook == "topk" else None
    if HOOKS[args.hook] is not None:
        ddp.register_comm_hook(state, HOOKS[args.hook])
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        start = time.monotonic()
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1000 * epoch + rank))
        total = 0.0
        for s in range(steps):
            batch = order[s * args.batch_size:(s + 1) * args.batch_size]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(ddp(x[batch]), y[batch])
            loss.backward()
            opt.step()
            total += loss.item()
        with torch.no_grad():
            accuracy = (model(xt).argmax(1) == yt).float().mean().item()
        if rank == 0:
            print("epoch %d: train loss %.4f, test accuracy %.4f, %.1f s (%d ranks, hook %s)" % (
                epoch + 1, total / max(steps, 1), accuracy, time.monotonic() - start, size, args.hook), flush=True)

    flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()]).numpy()
    every = comm.allgather(np.ascontiguousarray(flat)).reshape(size, -1)
    if not all(np.array_equal(every[0], every[r]) for r in range(size)):
        print("rank %d: the ranks hold different parameters" % rank, file=sys.stderr)
        sys.exit(1)
    if rank == 0:
        print("every rank holds the same parameters")


if __name__ == "__main__":
    main()
