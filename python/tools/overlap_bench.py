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

--bucket-cap-mb is DDP's bucket_cap_mb (0: DDP's default, 25 MiB with a
first bucket of 1 MiB); a comma list runs every variant once per setting,
all alternating in the same rounds, the batch chosen with the first.

A step is zero_grad, forward, backward (the reduction inside it) and the
optimizer's step, after a barrier; its time is the slowest rank's;
cpu_ms_per_step is a rank's CPU time per step (every thread of its
process; the median over steps, the mean over ranks). Rank 0
prints one JSON object per variant (median step, per-round medians) and,
per bucket setting, a summary: the overlap fraction
(compute + comm - step) / min(compute, comm) of async and default, and
each step over max(compute, comm).

After the rounds, 5 steps of async and 3 of comm per setting are traced
("overlap-timeline", rank 0's medians over the steps): per bucket, when
its hook was called (its gradients ready) and when its Future completed,
in ms from the backward pass's start (from the start of the allreduces
for comm), the forward pass's time and when backward() returned.
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

# The bucket setting overlap_bench measures by default: one Linear(1024,
# 1024) layer (4.0 MiB of float32) a bucket (docs/PYTORCH.md, "Bucket
# size for overlap").
DEFAULT_BUCKET_CAP_MB = "4"


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


def timed_hook(marks, bucket):
    """allreduce_hook, recording in marks[index] when it was called and
    when its Future completed (perf_counter seconds)."""
    i = bucket.index()
    marks[i] = [time.perf_counter(), None]

    def done(fut):
        marks[i][1] = time.perf_counter()
        return fut.value()

    return st.allreduce_hook(None, bucket).then(done)


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


def ddp_of(base, cap, group=None):
    kw = {} if cap == 0 else {"bucket_cap_mb": cap}
    return DDP(copy.deepcopy(base), gradient_as_bucket_view=True, process_group=group, **kw)


def step(ddp, opt, x):
    opt.zero_grad()
    ddp(x).square().mean().backward()
    opt.step()


def bucket_sizes(base, cap, x):
    """The buckets DDP makes with bucket_cap_mb cap (after its rebuild at
    the first step), in the order they become ready."""
    sizes = {}
    probe = ddp_of(base, cap)
    probe.register_comm_hook(sizes, recording_hook)
    opt = torch.optim.SGD(probe.parameters(), lr=1e-3)
    for _ in range(3):
        step(probe, opt, x)
    return probe, opt, [sizes[i] for i in sorted(sizes)]


def comm_only(comm, buckets):
    reqs = [comm.start_allreduce(b.numpy(), op="avg") for b in buckets]
    for r in reqs:
        r.wait()


def timeline_async(base, cap, x, steps=5):
    """Traced steps of the async hook (after two untraced ones): the
    median over steps of each time."""
    marks = {}
    ddp = ddp_of(base, cap)
    ddp.register_comm_hook(marks, timed_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    traces = []
    for i in range(2 + steps):
        marks.clear()
        dist.barrier()
        opt.zero_grad()
        t = time.perf_counter()
        loss = ddp(x).square().mean()
        t0 = time.perf_counter()
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        if i >= 2:
            ms = [(v - t0) * 1e3 for v in (t, t1)]
            traces.append([-ms[0], ms[1]] + [(marks[b][k] - t0) * 1e3 for k in (0, 1) for b in sorted(marks)])
    med = [round(statistics.median(col), 2) for col in zip(*traces)]
    n = len(marks)
    return {"steps": steps, "forward_ms": med[0], "backward_returned_ms": med[1],
            "ready_ms": med[2:2 + n], "done_ms": med[2 + n:]}


def timeline_comm(buckets, steps=3):
    """The comm variant's allreduces started together as async all_reduce
    Works on the backend, each Future's completion recorded (the progress
    thread completes them in start order): medians over steps."""
    traces = []
    for i in range(1 + steps):
        done = {}
        dist.barrier()
        t0 = time.perf_counter()
        futs = []
        for b, buf in enumerate(buckets):
            fut = dist.all_reduce(buf, async_op=True).get_future()
            futs.append(fut.then(lambda f, b=b: done.__setitem__(b, time.perf_counter())))
        torch.futures.wait_all(futs)
        t1 = time.perf_counter()
        if i >= 1:
            traces.append([(done[b] - t0) * 1e3 for b in sorted(done)] + [(t1 - t0) * 1e3])
    med = [round(statistics.median(col), 2) for col in zip(*traces)]
    return {"steps": steps, "done_ms": med[:-1], "waited_ms": med[-1]}


def parse_caps(s):
    caps = [float(c) for c in s.split(",")]
    if any(c < 0 for c in caps) or len(set(caps)) != len(caps):
        raise SystemExit("--bucket-cap-mb: distinct values >= 0 (0: DDP's default)")
    return [int(c) if c == int(c) else c for c in caps]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=0, help="per rank; 0: compute about as long as comm")
    p.add_argument("--probe-batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", default="none,comm,sync,async,default,gloo")
    p.add_argument("--bucket-cap-mb", default=DEFAULT_BUCKET_CAP_MB,
                   help="DDP's bucket_cap_mb, 0 for DDP's default; a comma list runs each")
    p.add_argument("--no-timeline", action="store_true", help="skip the traced steps")
    args = p.parse_args()
    caps = parse_caps(args.bucket_cap_mb)
    names = args.variants.split(",")
    init()
    rank, size = dist.get_rank(), dist.get_world_size()
    comm = st.default_comm()
    gloo = dist.new_group(backend="gloo") if "gloo" in names else None
    base = model(args.layers, args.hidden)
    params = sum(q.numel() for q in base.parameters())
    g = torch.Generator().manual_seed(rank)

    def data(batch):
        return torch.randn(batch, args.hidden, generator=g)

    probes = {cap: bucket_sizes(base, cap, data(args.probe_batch)) for cap in caps}
    buckets = {cap: [torch.zeros(n) for n in probes[cap][2]] for cap in caps}

    batch = args.batch
    if batch == 0:  # scale the probe batch so that compute is about comm
        probe, popt, _ = probes[caps[0]]
        x = data(args.probe_batch)
        tc, tm = [], []
        for _ in range(3):
            dist.barrier()
            t = time.perf_counter()
            step(probe, popt, x)
            tc.append(time.perf_counter() - t)
            dist.barrier()
            t = time.perf_counter()
            comm_only(comm, buckets[caps[0]])
            tm.append(time.perf_counter() - t)
        c, m = statistics.median(slowest(tc)), statistics.median(slowest(tm))
        batch = max(1, round(args.probe_batch * m / c))
        b = torch.tensor([batch])
        dist.broadcast(b, 0)
        batch = int(b.item())
    probes.clear()
    x = data(batch)

    variants = {}  # (cap, name) -> (step function, times, cpu times)
    for cap in caps:
        for name in names:
            if name == "comm":
                variants[cap, name] = ((lambda bs=buckets[cap]: comm_only(comm, bs)), [], [])
                continue
            ddp = ddp_of(base, cap, gloo if name == "gloo" else None)
            hook = {"none": no_reduction, "sync": sync_allreduce_hook, "async": st.allreduce_hook}.get(name)
            if hook is not None:
                ddp.register_comm_hook(None, hook)
            opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
            variants[cap, name] = ((lambda d=ddp, o=opt: step(d, o, x)), [], [])
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
    for (cap, name), (_, times, cpu) in variants.items():
        t = slowest(times)
        cpu_ms = statistics.median(cpu) * 1e3
        c = torch.tensor([cpu_ms], dtype=torch.float64)
        dist.all_reduce(c)
        med[cap, name] = statistics.median(t)
        rounds = [statistics.median(t[i * args.steps:(i + 1) * args.steps]) for i in range(args.rounds)]
        if rank == 0:
            print(json.dumps({"case": "overlap", "variant": name, "bucket_cap_mb": cap, "median_ms": med[cap, name] * 1e3,
                              "round_medians_ms": [round(v * 1e3, 2) for v in rounds],
                              "cpu_ms_per_step": c.item() / size, "np": size,
                              "params": params, "layers": args.layers, "hidden": args.hidden, "batch": batch,
                              "buckets": [b.numel() for b in buckets[cap]]}), flush=True)
    for cap in caps:
        if rank == 0 and (cap, "none") in med and (cap, "comm") in med:
            c, m = med[cap, "none"], med[cap, "comm"]
            row = {"case": "overlap-summary", "bucket_cap_mb": cap, "compute_ms": c * 1e3, "comm_ms": m * 1e3,
                   "np": size, "batch": batch}
            for name in ("sync", "async", "default"):
                if (cap, name) in med:
                    row[name + "_over_max"] = med[cap, name] / max(c, m)
                    row[name + "_over_sum"] = med[cap, name] / (c + m)
                    row[name + "_overlap"] = (c + m - med[cap, name]) / min(c, m)
            print(json.dumps(row), flush=True)
    variants.clear()
    if not args.no_timeline:
        for cap in caps:
            row = {"case": "overlap-timeline", "bucket_cap_mb": cap, "np": size, "batch": batch,
                   "buckets": [b.numel() for b in buckets[cap]],
                   "async": timeline_async(base, cap, x), "comm": timeline_comm(buckets[cap])}
            if rank == 0:
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
