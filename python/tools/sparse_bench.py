"""dist.all_reduce of an embedding's sparse gradient through the "sparcml"
backend against gloo's sparse all_reduce, in one run.

    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python python/tools/sparse_bench.py \\
        --rows 1048576 --dim 64 --touched 0.01 --backend both

Each rank's gradient touches --touched of the --rows rows, drawn without
replacement from a power law of exponent --alpha (popular rows shared
across ranks). The backends take turns every iteration. Prints, on rank
0, the median time of each over --iters calls (after --warmup), the
ratio, and the rows of each result.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import sparcml.torch  # noqa: F401 - registers the backend

torch.set_num_threads(1)


def timed(fns, iters, warmup):
    """Median seconds of each of fns, called in turn every iteration (so
    that a slower stretch of the machine weighs on all of them alike)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    out = [[] for _ in fns]
    for _ in range(iters):
        for k, fn in enumerate(fns):
            dist.barrier()
            t = time.perf_counter()
            fn()
            out[k].append(time.perf_counter() - t)
    return [statistics.median(o) for o in out]


def gradient(args):
    g = torch.Generator().manual_seed(dist.get_rank())
    weights = torch.arange(1, args.rows + 1, dtype=torch.float64).pow(-args.alpha)
    ids = torch.multinomial(weights, int(args.touched * args.rows), replacement=False, generator=g)
    return torch.sparse_coo_tensor(ids[None], torch.randn(ids.numel(), args.dim, generator=g),
                                   (args.rows, args.dim), check_invariants=False).coalesce()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1 << 20)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--touched", type=float, default=0.01, help="fraction of rows each rank touches")
    ap.add_argument("--alpha", type=float, default=1.1, help="power-law exponent of the row ids")
    ap.add_argument("--backend", choices=["sparcml", "gloo", "both"], default="both")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("sparcml")
    gloo = dist.new_group(backend="gloo")
    grad = gradient(args)
    groups = {"sparcml": None, "gloo": gloo}
    names = ["sparcml", "gloo"] if args.backend == "both" else [args.backend]
    calls, rows = [], {}
    for name in names:
        def call(group=groups[name]):
            out = grad.clone()
            dist.all_reduce(out, group=group)
            return out
        rows[name] = call().coalesce()._nnz()
        calls.append(call)
    res = dict(zip(names, timed(calls, args.iters, args.warmup)))
    if dist.get_rank() == 0:
        what = "%dx%d, %g of rows per rank, alpha %g, P=%d" % (args.rows, args.dim, args.touched, args.alpha,
                                                              dist.get_world_size())
        for name in names:
            print("%-8s sparse all_reduce %s: median %8.1f ms, %d rows in the result"
                  % (name, what, res[name] * 1e3, rows[name]))
        if len(names) == 2:
            print("gloo / sparcml: %.2fx" % (res["gloo"] / res["sparcml"]))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
