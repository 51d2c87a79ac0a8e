"""Times the reduction of one gradient alone, as a DDP step would reduce
it, without the step's computation: the gloo process group's allreduce
(DDP's default, then divided by the size), sparcml's dense allreduce, and
sparcml.Compressor's top-k with error feedback. The variants alternate
(A B C A B C ...); each iteration starts after a barrier and its time is
the slowest rank's. Prints the median of each, in ms, and the ratios.

    PYTHONPATH=python sparcml run -n 4 -- /usr/bin/python3 python/tools/reduce_bench.py --n 1333770
"""

import argparse
import json
import time

import numpy as np
import torch
import torch.distributed as dist

import sparcml
import sparcml.torch as st


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=1333770, help="gradient elements (float32)")
    p.add_argument("--density", type=float, default=0.01)
    p.add_argument("--quant", default=None)
    p.add_argument("--method", default="exact", help="the compressor's selection method")
    p.add_argument("--iters", type=int, default=5, help="per variant per round")
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    comm = st.init_process_group("gloo")
    g = np.random.default_rng(comm.rank).standard_normal(args.n).astype(np.float32)
    comp = sparcml.Compressor(comm, density=args.density, quant=args.quant, method=args.method)
    t = torch.from_numpy(g.copy())

    def gloo():
        t.copy_(torch.from_numpy(g))
        dist.all_reduce(t)
        t.div_(comm.size)

    def dense():
        x = g.copy()
        comm.allreduce(x, op="avg")

    def topk():
        x = g.copy()
        comp.reduce(x)

    variants = {"gloo": (gloo, []), "sparcml-dense": (dense, []), "topk": (topk, [])}
    for fn, _ in variants.values():
        fn()
    for _ in range(args.rounds):
        for fn, times in variants.values():
            for _ in range(args.iters):
                comm.barrier()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
    med = {}
    for name, (_, times) in variants.items():
        med[name] = float(np.median(comm.allreduce(np.array(times), op="max")))
        if comm.rank == 0:
            print(json.dumps({"variant": name, "np": comm.size, "n": args.n, "density": args.density,
                              "quant": args.quant, "method": args.method, "iters": len(times), "ms_median": med[name] * 1e3}), flush=True)
    if comm.rank == 0:
        for name in ("sparcml-dense", "topk"):
            print("%s: %.2fx faster than gloo" % (name, med["gloo"] / med[name]), flush=True)


if __name__ == "__main__":
    main()
