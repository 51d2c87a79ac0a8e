"""Times DDP training steps with each gradient reduction: DDP's default
(the gloo process group's allreduce), sparcml.torch.allreduce_hook and
sparcml.torch.topk_hook, and "none", a hook that reduces nothing (the
step's computation alone, so that step - none is what the reduction
costs). Every variant trains its own copy of one MLP;
they alternate in rounds of --steps steps (A B C A B C ...), so a shared
machine's noise falls on all of them. A step is zero_grad, forward,
backward (the hook's reduction inside it) and the optimizer's step; its
time is the slowest rank's. Prints one JSON object per variant with the
median step time, and the ratios to the default.

    PYTHONPATH=python sparcml run -n 4 -- /usr/bin/python3 python/tools/ddp_bench.py --hidden 4096 --batch 8 --bucket-view
"""

import argparse
import copy
import json
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml.torch as st


def _no_reduction(_, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--hidden", type=int, default=1024, help="width of the MLP's first hidden layer")
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--quant", default=None)
    p.add_argument("--method", default="exact", help="topk_hook's selection method")
    p.add_argument("--steps", type=int, default=10, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", default="none,default,allreduce,topk")
    p.add_argument("--bucket-view", action="store_true",
                   help="DDP(gradient_as_bucket_view=True): gradients live in the buckets, no copies in or out")
    args = p.parse_args()
    torch.set_num_threads(1)
    comm = st.init_process_group("gloo")
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(784, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden // 2),
                         nn.ReLU(), nn.Linear(args.hidden // 2, 10))
    params = sum(q.numel() for q in base.parameters())
    variants = {}
    for name in args.variants.split(","):
        ddp = DDP(copy.deepcopy(base), gradient_as_bucket_view=args.bucket_view)
        state = None
        if name == "none":
            ddp.register_comm_hook(None, _no_reduction)
        elif name == "allreduce":
            ddp.register_comm_hook(None, st.allreduce_hook)
        elif name == "topk":
            state = st.TopkState(density=args.density, quant=args.quant, method=args.method)
            ddp.register_comm_hook(state, st.topk_hook)
        variants[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9), state, [])
    g = torch.Generator().manual_seed(comm.rank)
    x, y = torch.randn(args.batch, 784, generator=g), torch.randint(0, 10, (args.batch,), generator=g)

    def step(ddp, opt):
        opt.zero_grad()
        nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for ddp, opt, _, _ in variants.values():  # warm-up: the hooks' dense start, bucket rebuild
        for _ in range(3):
            step(ddp, opt)
    for _ in range(args.rounds):
        for ddp, opt, _, times in variants.values():
            for _ in range(args.steps):
                dist.barrier()
                t0 = time.perf_counter()
                step(ddp, opt)
                times.append(time.perf_counter() - t0)
    medians = {}
    for name, (_, _, state, times) in variants.items():
        t = comm.allreduce(np.array(times), op="max")
        medians[name] = float(np.median(t))
        if comm.rank == 0:
            row = {"variant": name, "np": comm.size, "params": params, "batch": args.batch,
                   "bucket_view": args.bucket_view, "steps": len(times), "step_ms_median": medians[name] * 1e3}
            if state is not None:
                row.update(density=args.density, quant=args.quant, method=args.method, rate=state.compression_stats()[0])
            print(json.dumps(row), flush=True)
    if comm.rank == 0 and "default" in medians:
        base = medians.get("none", 0.0)
        for name, m in medians.items():
            if name not in ("default", "none"):
                print("%s: step %.2fx faster than the default; reduction (step - none) %.1f ms against %.1f ms" % (
                    name, medians["default"] / m, (m - base) * 1e3, (medians["default"] - base) * 1e3), flush=True)


if __name__ == "__main__":
    main()
