"""The cost of a small all_reduce through the "sparcml" backend against the
same call through the C ABI, in one run.

    PYTHONPATH=python bin/sparcml run -n 2 -- .venv/bin/python python/tools/call_bench.py

and a large one, against `sparcml bench`'s figure for the same operation:

    PYTHONPATH=python bin/sparcml run -n 4 -- .venv/bin/python python/tools/call_bench.py \
        --sizes 16777216 --rounds 10 --burst 1 --warmup 2 --variants "C ABI (ctypes),backend"

For each size (--sizes, float32 elements) the variants take turns, --burst
calls back to back each per round, after a barrier, so that whatever else
the machine does falls on all of them alike:

- "C ABI": sparcml_allreduce through ctypes with its arguments prepared
  (what a C program pays, plus one ctypes call);
- "C ABI, 10 us between calls": the same, each call followed by 10 us of
  busy Python (about what torch's dispatch and the backend add to a
  call): what a little CPU outside the library costs once ranks
  outnumber cores;
- "sparcml.Comm": Comm.allreduce of a NumPy array (the Python binding);
- "backend": dist.all_reduce(tensor) on the sparcml process group;
- "backend on NumPy memory": the same on a tensor over a NumPy array's
  memory (NumPy asks for transparent huge pages for large arrays, torch's
  allocator only with THP_MEM_ALLOC_ENABLE=1; over shared memory a 16M
  allreduce is bound by copying, and the pages' size shows);
- "backend async": dist.all_reduce(tensor, async_op=True).wait();
- "backend future": the same through get_future().wait() (the progress
  thread completes it);
- "backend, torch's flight recorder": the synchronous call on a second
  sparcml group with torch's FlightRecorderHook attached (what torch
  attaches to a backend that does not record itself; sparcml declares
  that it does, see _declare_self_recording);
- "gloo": dist.all_reduce on a gloo group of the same ranks.

Prints, on rank 0, each variant's median per call (the slowest rank's), the
medians minus the C ABI's, and the median CPU time per call of the busiest
rank's process (every thread: the Go runtime's, torch's).
"""

import argparse
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist

import sparcml.torch as st
from sparcml._lib import lib

torch.set_num_threads(1)


def flight_recorded_group():
    """A second sparcml group of every rank with torch's FlightRecorderHook
    attached, or None where torch has no such hook."""
    hook = getattr(torch._C._distributed_c10d, "FlightRecorderHook", None)
    if hook is None:
        return None, None
    g = dist.new_group(backend="sparcml")
    return g, hook.attach(g, list(range(dist.get_world_size())))


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def variants(n, comm, gloo, recorded):
    so, h = lib(), comm._h
    arr = np.ones(n, dtype=np.float32)
    ptr = arr.ctypes.data
    t, tg = torch.ones(n), torch.ones(n)
    tn = torch.from_numpy(np.ones(n, dtype=np.float32))
    out = {
        "C ABI (ctypes)": lambda keep=arr: so.sparcml_allreduce(h, ptr, n, 0, 0),  # keep: ptr's array lives on
        "C ABI, 10 us between calls": lambda keep=arr: (so.sparcml_allreduce(h, ptr, n, 0, 0), busy(10e-6)),
        "sparcml.Comm.allreduce": lambda: comm.allreduce(arr),
        "backend": lambda: dist.all_reduce(t),
        "backend on NumPy memory": lambda: dist.all_reduce(tn),
        "backend async_op wait": lambda: dist.all_reduce(t, async_op=True).wait(),
        "backend get_future wait": lambda: dist.all_reduce(t, async_op=True).get_future().wait(),
        "gloo": lambda: dist.all_reduce(tg, group=gloo),
    }
    if recorded is not None:
        out["backend, torch's flight recorder"] = lambda: dist.all_reduce(t, group=recorded)
    return out


def measure(fns, comm, rounds, warmup, burst):
    """Median seconds per call of each fn, and median CPU seconds per call
    (this process's, every thread): per round, each fn in turn runs burst
    calls back to back after a barrier (the ranks keep each other in
    step, as in a training loop), timed together; a round's time is the
    slowest rank's, its CPU the busiest rank's."""
    names = list(fns)
    times = {k: [] for k in names}
    cpus = {k: [] for k in names}
    for i in range(warmup + rounds):
        order = names[i % len(names):] + names[:i % len(names)]
        for k in order:
            fn = fns[k]
            comm.barrier()
            s, c = time.perf_counter(), time.process_time()
            for _ in range(burst):
                fn()
            took = np.array([(time.perf_counter() - s) / burst, (time.process_time() - c) / burst])
            comm.allreduce(took, op="max")  # the slowest rank's, as sparcml bench reports
            if i >= warmup:
                times[k].append(took[0])
                cpus[k].append(took[1])
    return ({k: statistics.median(v) for k, v in times.items()},
            {k: statistics.median(v) for k, v in cpus.items()})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1,1024", help="float32 elements, comma-separated")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--burst", type=int, default=20, help="calls timed together")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--variants", default="", help="comma-separated names to run (default: all)")
    args = ap.parse_args()
    dist.init_process_group("sparcml")
    gloo = dist.new_group(backend="gloo")
    recorded, _hook = flight_recorded_group()  # the hook records while _hook lives
    comm = st.default_comm()
    for n in (int(s) for s in args.sizes.split(",")):
        fns = variants(n, comm, gloo, recorded)
        if args.variants:
            fns = {k: fns[k] for k in args.variants.split(",")}
        med, cpu = measure(fns, comm, args.rounds, args.warmup, args.burst)
        if comm.rank == 0:
            base = med.get("C ABI (ctypes)", 0.0)
            print("all_reduce of %d float32 on %d ranks, median over %d rounds of %d calls back to back:" % (
                n, comm.size, args.rounds, args.burst))
            for k, v in med.items():
                print("  %-33s %8.1f us  %+8.1f us over the C ABI  CPU %7.1f us" % (
                    k, v * 1e6, (v - base) * 1e6, cpu[k] * 1e6))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
