"""How much of DDP's gradient reduction the asynchronous allreduce_hook
hides behind the backward pass, on the "sparcml" backend.

    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python python/tools/overlap_bench.py
    go run ./test/cluster/benchtorch -only overlap    # on 4 emulated hosts (make bench-torch-cluster)

The model is --layers Linear(--hidden, --hidden) layers with ReLUs; the
batch is chosen so that the step's computation takes about as long as the
reduction of its gradient (--batch fixes it instead): a step of the "none"
variant and an allreduce of the model's gradient are timed at --probe-batch
and the batch scaled by their ratio (the largest over the ranks). Variants,
each a DDP copy of one model on the backend (gradient_as_bucket_view, so no
bucket copies), alternating in rounds of --steps steps:

- none: a hook that reduces nothing: the computation alone (compute);
- comm: no model: sparcml allreduces of DDP's buckets (sizes recorded from
  a step), started together and waited for: the communication alone;
- sync: allreduce_hook waited for inside the hook (DDP waits for every
  bucket before the backward pass goes on): about compute + comm;
- async: sparcml.torch.allreduce_hook, whose Future the progress thread
  completes while the backward pass runs;
- default: DDP's own reduction through the backend's all_reduce (a Work);
- gloo: DDP's own reduction on a gloo group, for reference.

A step is zero_grad, forward, backward (the reduction inside it) and the
optimizer's step, after a barrier; its time is the slowest rank's;
cpu_ms_per_step is a rank's CPU time per step (every thread of its
process; the median over steps, the mean over ranks). Rank 0
prints one JSON object per variant (median step, per-round medians) and a
summary: the overlap fraction (compute + comm - step) / min(compute, comm)
of async and default, and each step over max(compute, comm).
"""

import argparse
import copy
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import sparcml.torch as st

torch.set_num_threads(1)


def init():
    env = os.environ
    if all(env.get(v) for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        dist.init_process_group("sparcml")
        return
    host, port = env["SPARCML_ADDR"].rsplit(":", 1)
    dist.init_process_group("sparcml", init_method="tcp://%s:%s" % (host, port),
                            rank=int(env["SPARCML_RANK"]), world_size=int(env["SPARCML_SIZE"]))


def no_reduction(_, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def sync_allreduce_hook(state, bucket):
    """allreduce_hook, waited for before DDP's backward pass goes on."""
    value = st.allreduce_hook(state, bucket).wait()
    fut = torch.futures.Future()
    fut.set_result(value)
    return fut


def recording_hook(sizes, bucket):
    """Reduces nothing; records the bucket's size in sizes."""
    sizes[bucket.index()] = bucket.buffer().numel()
    return no_reduction(None, bucket)


def model(layers, hidden):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(hidden, hidden), nn.ReLU()]
    return nn.Sequential(*mods)


def slowest(times):
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=0, help="per rank; 0: compute about as long as comm")
    p.add_argument("--probe-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", default="none,comm,sync,async,default,gloo")
    args = p.parse_args()
    init()
    rank, size = dist.get_rank(), dist.get_world_size()
    comm = st.default_comm()
    gloo = dist.new_group(backend="gloo") if "gloo" in args.variants.split(",") else None
    base = model(args.layers, args.hidden)
    params = sum(q.numel() for q in base.parameters())
    g = torch.Generator().manual_seed(rank)

    def data(batch):
        return torch.randn(batch, args.hidden, generator=g)

    def step(ddp, opt, x):
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()

    # The buckets DDP makes (after its rebuild at the first step).
    sizes = {}
    probe = DDP(copy.deepcopy(base), gradient_as_bucket_view=True)
    probe.register_comm_hook(sizes, recording_hook)
    popt = torch.optim.SGD(probe.parameters(), lr=1e-3)
    for _ in range(3):
        step(probe, popt, data(args.probe_batch))
    buckets = [torch.zeros(sizes[i]) for i in sorted(sizes)]

    def comm_only():
        reqs = [comm.start_allreduce(b.numpy(), op="avg") for b in buckets]
        for r in reqs:
            r.wait()

    batch = args.batch
    if batch == 0:  # scale the probe batch so that compute is about comm
        x = data(args.probe_batch)
        tc, tm = [], []
        for _ in range(3):
            dist.barrier()
            t = time.perf_counter()
            step(probe, popt, x)
            tc.append(time.perf_counter() - t)
            dist.barrier()
            t = time.perf_counter()
            comm_only()
            tm.append(time.perf_counter() - t)
        c, m = statistics.median(slowest(tc)), statistics.median(slowest(tm))
        batch = max(1, round(args.probe_batch * m / c))
        b = torch.tensor([batch])
        dist.broadcast(b, 0)
        batch = int(b.item())
    del probe
    x = data(batch)

    variants = {}
    for name in args.variants.split(","):
        if name == "comm":
            variants[name] = (comm_only, [], [])
            continue
        ddp = DDP(copy.deepcopy(base), gradient_as_bucket_view=True, process_group=gloo if name == "gloo" else None)
        hook = {"none": no_reduction, "sync": sync_allreduce_hook, "async": st.allreduce_hook}.get(name)
        if hook is not None:
            ddp.register_comm_hook(None, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        variants[name] = ((lambda d=ddp, o=opt: step(d, o, x)), [], [])
    for fn, _, _ in variants.values():  # warm-up: bucket rebuild, first calls
        for _ in range(2):
            fn()
    for _ in range(args.rounds):
        for fn, times, cpu in variants.values():
            for _ in range(args.steps):
                dist.barrier()
                c = time.process_time()
                t = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
    med = {}
    for name, (_, times, cpu) in variants.items():
        t = slowest(times)
        cpu_ms = statistics.median(cpu) * 1e3
        c = torch.tensor([cpu_ms], dtype=torch.float64)
        dist.all_reduce(c)
        med[name] = statistics.median(t)
        rounds = [statistics.median(t[i * args.steps:(i + 1) * args.steps]) for i in range(args.rounds)]
        if rank == 0:
            print(json.dumps({"case": "overlap", "variant": name, "median_ms": med[name] * 1e3,
                              "round_medians_ms": [round(v * 1e3, 2) for v in rounds],
                              "cpu_ms_per_step": c.item() / size, "np": size,
                              "params": params, "layers": args.layers, "hidden": args.hidden, "batch": batch,
                              "buckets": [b.numel() for b in buckets]}), flush=True)
    if rank == 0 and "none" in med and "comm" in med:
        c, m = med["none"], med["comm"]
        row = {"case": "overlap-summary", "compute_ms": c * 1e3, "comm_ms": m * 1e3, "np": size, "batch": batch}
        for name in ("sync", "async", "default"):
            if name in med:
                row[name + "_over_max"] = med[name] / max(c, m)
                row[name + "_over_sum"] = med[name] / (c + m)
                row[name + "_overlap"] = (c + m - med[name]) / min(c, m)
        print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
