"""Times blocking allreduces from Python, as capi/bench times them from Go
(and `sparcml bench` times its own): per iteration a barrier, then one
timed comm.allreduce; each iteration's time is the slowest rank's, and the
median is printed as one JSON object per size.

    PYTHONPATH=python sparcml run -n 2 -- /usr/bin/python3 python/tools/bench.py --sizes 8 --iters 2000
"""

import argparse
import json
import time

import numpy as np

import sparcml


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8", help="element counts, comma-separated (K, M suffixes x1024)")
    p.add_argument("--iters", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    args = p.parse_args()
    comm = sparcml.init()
    for s in args.sizes.split(","):
        n = int(s[:-1]) * {"K": 1 << 10, "M": 1 << 20}[s[-1]] if s[-1] in "KM" else int(s)
        data = np.ones(n, dtype=np.float32)
        times = np.zeros(args.iters)
        for it in range(-args.warmup, args.iters):
            data.fill(1)
            comm.barrier()
            t0 = time.perf_counter()
            comm.allreduce(data)
            t = time.perf_counter() - t0
            if it >= 0:
                times[it] = t
        comm.allreduce(times, op="max")
        times.sort()
        if comm.rank == 0:
            print(json.dumps({"binding": "python", "op": "allreduce", "np": comm.size, "n": n, "dtype": "float32",
                              "iters": args.iters, "time_us_median": times[args.iters // 2] * 1e6,
                              "time_us_min": times[0] * 1e6}), flush=True)
    comm.finalize()


if __name__ == "__main__":
    main()
