"""Where a small all_reduce's CPU and wake-ups go, thread by thread: for
each variant of call_bench.py, every thread of this rank's process with
its CPU time, its time waiting for a CPU (/proc/self/task/*/schedstat)
and its voluntary and involuntary context switches (status), per call.

    PYTHONPATH=python bin/sparcml run -n 2 -- .venv/bin/python python/tools/call_threads.py

Each rank prints its own threads that ran: the caller's (the process id),
the Go runtime's (sysmon, the transports' goroutines), torch's and
gloo's. Reading /proc between bursts slows the ranks down, so the times
are not call_bench's; compare the variants with each other.
"""

import argparse
import os
import time

import torch.distributed as dist
from call_bench import variants

import sparcml.torch as st


def snapshot():
    """tid -> [name, run ns, runqueue ns, voluntary, involuntary]."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        base = "/proc/self/task/%s/" % tid
        try:
            with open(base + "schedstat") as f:
                run, wait = (int(x) for x in f.read().split()[:2])
            with open(base + "comm") as f:
                name = f.read().strip()
            with open(base + "status") as f:
                sw = {k: int(v) for k, v in (line.split(":") for line in f if "ctxt_switches" in line)}
        except OSError:
            continue  # the thread ended
        out[int(tid)] = [name, run, wait, sw["voluntary_ctxt_switches"], sw["nonvoluntary_ctxt_switches"]]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1, help="float32 elements")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--variants", default="C ABI (ctypes);C ABI, 10 us between calls;backend",
                    help="semicolon-separated names of call_bench.py's variants")
    args = ap.parse_args()
    dist.init_process_group("sparcml")
    comm = st.default_comm()
    every = variants(args.n, comm, None, None)
    fns = {k: every[k] for k in args.variants.split(";")}
    total = {k: {} for k in fns}
    for i in range(10 + args.rounds):
        for k, fn in fns.items():
            comm.barrier()
            before = snapshot()
            for _ in range(args.burst):
                fn()
            after = snapshot()
            if i < 10:
                continue
            for tid, now in after.items():
                was = before.get(tid, [now[0], 0, 0, 0, 0])
                acc = total[k].setdefault(tid, [now[0], 0, 0, 0, 0])
                for j in range(1, 5):
                    acc[j] += now[j] - was[j]
    calls = args.rounds * args.burst
    lines = ["rank %d (pid %d), per call:" % (comm.rank, os.getpid())]
    for k, threads in total.items():
        lines.append("  %s" % k)
        for tid, (name, run, wait, vol, inv) in sorted(threads.items()):
            if run / calls >= 200 or (vol + inv) / calls >= 0.02:
                lines.append("    tid %7d %-15s CPU %6.1f us  waiting for a CPU %6.1f us  switches: voluntary %5.2f, "
                             "involuntary %5.2f" % (tid, name, run / calls / 1e3, wait / calls / 1e3, vol / calls,
                                                    inv / calls))
    print("\n".join(lines), flush=True)
    time.sleep(0.2 * comm.rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
