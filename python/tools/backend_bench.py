"""dist.all_reduce through the "sparcml" backend against gloo, in one run,
and the backend's cost per call against the NumPy binding's (the C ABI).

    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python python/tools/backend_bench.py --n 16777216

Prints, on rank 0, the median time of each over --iters calls (after
--warmup), and the ratios.
"""

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import sparcml.torch as st

torch.set_num_threads(1)


def timed(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(iters):
        dist.barrier()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 24)
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1 << 20, help="embedding rows of the sparse case")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--touched", type=float, default=0.01, help="fraction of rows each rank touches")
    args = ap.parse_args()
    dist.init_process_group("sparcml")
    gloo = dist.new_group(backend="gloo")
    comm = st.default_comm()
    big = torch.ones(args.n)
    small = torch.ones(args.small)
    small_np = np.ones(args.small, dtype=np.float32)
    res = {
        "sparcml backend, %d float32" % args.n: timed(lambda: dist.all_reduce(big), args.iters, args.warmup),
        "gloo, %d float32" % args.n: timed(lambda: dist.all_reduce(big, group=gloo), args.iters, args.warmup),
        "sparcml backend, %d float32" % args.small: timed(lambda: dist.all_reduce(small), 20 * args.iters, 10),
        "C ABI (sparcml.Comm), %d float32" % args.small: timed(lambda: comm.allreduce(small_np), 20 * args.iters, 10),
    }
    # The sparse case: an embedding gradient touching --touched of the rows
    # per rank, with power-law ids (popular rows shared across ranks).
    g = torch.Generator().manual_seed(dist.get_rank())
    weights = torch.arange(1, args.rows + 1, dtype=torch.float64).pow(-1.1)
    ids = torch.multinomial(weights, int(args.touched * args.rows), replacement=False, generator=g)
    grad = torch.sparse_coo_tensor(ids[None], torch.randn(ids.numel(), args.dim, generator=g),
                                   (args.rows, args.dim), check_invariants=False).coalesce()

    def sparse(group):
        dist.all_reduce(grad.clone(), group=group)
    res["sparcml backend, sparse %dx%d, %g rows" % (args.rows, args.dim, args.touched)] = timed(
        lambda: sparse(None), args.iters, args.warmup)
    res["gloo, sparse %dx%d, %g rows" % (args.rows, args.dim, args.touched)] = timed(
        lambda: sparse(gloo), args.iters, args.warmup)
    if dist.get_rank() == 0:
        for k, v in res.items():
            print("%-45s median %9.1f us" % (k, v * 1e6))
        keys = list(res)
        print("gloo / sparcml backend (large): %.2fx" % (res[keys[1]] / res[keys[0]]))
        print("backend call cost over the C ABI (small): %+.1f us" % ((res[keys[2]] - res[keys[3]]) * 1e6))
        print("gloo / sparcml backend (sparse): %.2fx" % (res[keys[5]] / res[keys[4]]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
