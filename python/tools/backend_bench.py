"""dist.all_reduce through the "sparcml" backend against gloo, in one run,
and against `sparcml bench` of the same operation on the same ranks.

    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python python/tools/backend_bench.py --sparcml-bench bin/sparcml
    go run ./test/cluster/benchtorch          # the same on emulated hosts (make bench-torch-cluster)

Cases (--cases, a comma list):
- dense: an all_reduce (SUM) of --n float32, the backend and gloo, and
  the same allreduce through the C ABI (sparcml.Comm.allreduce on the
  backend's communicator, variant capi);
- bench: `sparcml bench --op allreduce` of the same --n float32 (with
  each algorithm of --bench-algos; variant sparcml-bench for auto, the
  backend's choice, sparcml-bench-ALGO for the others), started
  by every rank as a job of its own (a new rendezvous port per round)
  while this process idles, so the Python path is compared with the
  library's own benchmark on the same ranks;
- sparse: the gradient of an nn.Embedding(--rows, --dim) with --touched of
  the rows per rank drawn from a power law (sampling weight of row r
  proportional to (r+1)^-1.1, without replacement; popular rows are shared
  across ranks), as a sparse COO tensor, the backend and gloo;
- small: an all_reduce of --small float32 through the backend and through
  the C ABI (sparcml.Comm.allreduce on the backend's communicator).

cpu_ms_per_call is the CPU time of a rank's process (all its threads: the
Go runtime's, gloo's) per timed call, the mean over the ranks.

Every round runs each variant in turn (A B C A B C ...), --iters timed
calls each after --warmup in the first round, so a slow stretch of a shared
machine falls on all of them. Each call starts after a barrier; its time is
the slowest rank's. Rank 0 prints one JSON object per variant: the median
over every round's calls, each round's median, and the ratios. Before the
timed calls, each case's results are checked against gloo's on the same
inputs (sparse: the same rows, no all-zero row, values within float
tolerance); a mismatch exits with status 1.

The process group: under torchrun or `sparcml run` (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), env://; under a launcher that sets only
sparcml's variables (test/cluster's jobs), its rendezvous address holds
torch's store.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

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


class Timer:
    """Each call after a barrier on the group the call uses; per-call times
    are maxed over the ranks at the end."""

    def __init__(self):
        self.times = {}  # variant -> list of (round, seconds)
        self.cpu = {}  # variant -> CPU seconds of this process (every thread) in its timed calls
        self.slowest_already = {}  # variant -> rank 0's (round, seconds), already the slowest rank's

    def run(self, name, fn, group, iters, warmup, rnd):
        for _ in range(warmup):
            fn()
        out = self.times.setdefault(name, [])
        for _ in range(iters):
            dist.barrier(group=group)
            c = time.process_time()
            t = time.perf_counter()
            fn()
            out.append((rnd, time.perf_counter() - t))
            self.cpu[name] = self.cpu.get(name, 0.0) + time.process_time() - c

    def cpu_per_call(self, group):
        """{variant: CPU seconds per call, the mean over the ranks}."""
        out = {}
        for name in sorted(self.cpu):
            t = torch.tensor([self.cpu[name] / len(self.times[name])], dtype=torch.float64)
            dist.all_reduce(t, group=group)
            out[name] = t.item() / dist.get_world_size(group)
        return out

    def add_slowest(self, name, rnd, seconds):
        self.slowest_already.setdefault(name, []).append((rnd, seconds))

    def slowest(self, group):
        """{variant: [(round, seconds maxed over the ranks)]}."""
        out = dict(self.slowest_already)
        for name in sorted(self.times):
            rows = self.times[name]
            t = torch.tensor([s for _, s in rows], dtype=torch.float64)
            dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
            out[name] = [(r, float(s)) for (r, _), s in zip(rows, t.tolist())]
        return out


def embedding_grad(rows, dim, touched, seed):
    """The sparse gradient of an nn.Embedding(rows, dim) after a batch
    whose ids touch `touched` of the rows, drawn from a power law."""
    g = torch.Generator().manual_seed(seed)
    weights = torch.arange(1, rows + 1, dtype=torch.float64).pow(-1.1)
    ids = torch.multinomial(weights, max(1, int(touched * rows)), replacement=False, generator=g)
    return torch.sparse_coo_tensor(ids[None], torch.randn(ids.numel(), dim, generator=g),
                                   (rows, dim), check_invariants=False).coalesce()


def check_sparse(got, want):
    """got (the backend's) holds exactly want's nonzero rows, no all-zero
    row, values within float tolerance. Returns the union's row count."""
    keep = want.values().ne(0).any(dim=1)
    want_rows, want_vals = want.indices()[0][keep], want.values()[keep]
    if got.values().numel() and not bool(got.values().ne(0).any(dim=1).all()):
        fail("sparse: the backend's result holds an all-zero row")
    if not torch.equal(got.indices()[0], want_rows):
        fail("sparse: the backend's rows differ from gloo's (%d against %d)" % (got._nnz(), want_rows.numel()))
    if not torch.allclose(got.values(), want_vals, rtol=1e-5, atol=1e-5):
        fail("sparse: the backend's values differ from gloo's")
    return int(want.indices().shape[1])


def fail(msg):
    print("backend_bench: rank %d: %s" % (dist.get_rank(), msg), file=sys.stderr, flush=True)
    sys.exit(1)


def sparcml_bench(binary, n, algo, iters, warmup, port_offset):
    """One `sparcml bench` job of the same ranks, on a rendezvous port of
    its own; returns rank 0's JSON row (None on the other ranks)."""
    env = dict(os.environ)
    host, port = env["SPARCML_ADDR"].rsplit(":", 1)
    env["SPARCML_ADDR"] = "%s:%d" % (host, int(port) + 101 + port_offset)
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    env.setdefault("SPARCML_RANK", str(dist.get_rank()))
    env.setdefault("SPARCML_SIZE", str(dist.get_world_size()))
    out = subprocess.run([binary, "bench", "--op", "allreduce", "--algo", algo, "--sizes", str(n), "--iters", str(iters),
                          "--warmup", str(warmup), "--format", "json", "--progress=false"],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        fail("sparcml bench exited with %d: %s" % (out.returncode, out.stderr[-2000:]))
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return rows[0] if rows else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="dense,bench,sparse,small")
    ap.add_argument("--n", type=int, default=1 << 24, help="float32 elements of the dense case")
    ap.add_argument("--small", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=3, help="timed calls per variant per round")
    ap.add_argument("--small-iters", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rows", type=int, default=1 << 20, help="embedding rows of the sparse case")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--touched", type=float, default=0.01, help="fraction of rows each rank touches")
    ap.add_argument("--sparcml-bench", default=None, help="the sparcml CLI, for the bench case")
    ap.add_argument("--bench-algos", default="auto", help="the bench case's --algo values, in turn")
    args = ap.parse_args()
    cases = set(args.cases.split(","))
    init()
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    comm = st.default_comm()
    timer = Timer()
    meta = {"np": size, "torch": torch.__version__}

    big = torch.ones(args.n)
    big_np = big.numpy()
    if "dense" in cases:  # check once: both sums of the same seeded input
        x = torch.randn(args.n, generator=torch.Generator().manual_seed(rank))
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
            fail("dense: the backend's sum differs from gloo's")
        del x, a, b
    grad = None
    if "sparse" in cases:
        grad = embedding_grad(args.rows, args.dim, args.touched, rank)
        a, b = grad.clone(), grad.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        meta["union_rows"] = check_sparse(a.coalesce(), b.coalesce())
        meta["rows_per_rank"] = grad._nnz()
        del a, b
    small = torch.ones(args.small)
    small_np = np.ones(args.small, dtype=np.float32)
    if "bench" in cases and not args.sparcml_bench:
        fail("the bench case needs --sparcml-bench")

    for rnd in range(args.rounds):
        w = args.warmup if rnd == 0 else 0
        if "dense" in cases:
            timer.run("dense/sparcml", lambda: dist.all_reduce(big), None, args.iters, w, rnd)
            timer.run("dense/gloo", lambda: dist.all_reduce(big, group=gloo), gloo, args.iters, w, rnd)
            timer.run("dense/capi", lambda: comm.allreduce(big_np), None, args.iters, w, rnd)
        if "bench" in cases:
            for i, algo in enumerate(args.bench_algos.split(",")):
                dist.barrier(group=gloo)
                row = sparcml_bench(args.sparcml_bench, args.n, algo, args.iters, max(w, 1), 10 * rnd + i)
                if row is None:
                    continue
                name = "dense/sparcml-bench" + ("" if algo == "auto" else "-" + algo)
                for _ in range(args.iters):  # the round's median (slowest rank's calls), weighted as the others
                    timer.add_slowest(name, rnd, row["time_us_median"] * 1e-6)
                if algo == "auto":
                    meta.setdefault("bench_algo", row.get("algo_chosen"))
                    meta.setdefault("bench_bytes_sent_per_rank", row.get("bytes_sent_per_rank"))
        if "sparse" in cases:
            timer.run("sparse/sparcml", lambda: dist.all_reduce(grad.clone()), None, args.iters, w, rnd)
            timer.run("sparse/gloo", lambda: dist.all_reduce(grad.clone(), group=gloo), gloo, args.iters, w, rnd)
        if "small" in cases:
            timer.run("small/sparcml", lambda: dist.all_reduce(small), None, args.small_iters, 10 if w else 0, rnd)
            timer.run("small/capi", lambda: comm.allreduce(small_np), None, args.small_iters, 10 if w else 0, rnd)

    res = timer.slowest(gloo)
    cpu = timer.cpu_per_call(gloo)
    if rank == 0:
        med = {k: statistics.median(s for _, s in v) for k, v in res.items()}
        for k, v in res.items():
            case, variant = k.split("/")
            per_round = [statistics.median(s for r, s in v if r == i) for i in range(args.rounds)]
            row = {"case": case, "variant": variant, "median_ms": med[k] * 1e3,
                   "round_medians_ms": [round(x * 1e3, 3) for x in per_round], "calls": len(v), **meta}
            if k in cpu:
                row["cpu_ms_per_call"] = cpu[k] * 1e3
            row["n"] = {"dense": args.n, "small": args.small}.get(case, args.rows * args.dim)
            if case == "sparse":
                row.update(rows=args.rows, dim=args.dim, touched=args.touched)
            print(json.dumps(row), flush=True)
        ratios = {}
        if "dense/gloo" in med and "dense/sparcml" in med:
            ratios["dense_gloo_over_sparcml"] = med["dense/gloo"] / med["dense/sparcml"]
        if "dense/sparcml-bench" in med and "dense/sparcml" in med:
            ratios["dense_sparcml_over_bench"] = med["dense/sparcml"] / med["dense/sparcml-bench"]
        if "dense/capi" in med and "dense/sparcml" in med:
            ratios["dense_sparcml_over_capi"] = med["dense/sparcml"] / med["dense/capi"]
        if "sparse/gloo" in med:
            ratios["sparse_gloo_over_sparcml"] = med["sparse/gloo"] / med["sparse/sparcml"]
        if "small/capi" in med:
            ratios["small_backend_minus_capi_us"] = (med["small/sparcml"] - med["small/capi"]) * 1e6
        print(json.dumps({"case": "ratios", **ratios, **meta}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
