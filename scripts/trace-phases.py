#!/usr/bin/env python3
"""Splits the timed part of `sparcml bench` iterations into phases, from
execution traces (sparcml bench --trace), to see where a p2p round trip's time
goes in our transport and in the plain socket of --baseline.

    sparcml bench -n 2 --op p2p --sizes 16K --baseline --trace /tmp/t \
        --iters 400 --warmup 3
    go tool trace -d=parsed /tmp/t.rank0 > /tmp/t0.txt
    go tool trace -d=parsed /tmp/t.rank1 > /tmp/t1.txt
    scripts/trace-phases.py /tmp/t0.txt /tmp/t1.txt

Each region ("sparcml" or "raw-tcp") is the timed part of one iteration
on one rank. For each rank and region it prints medians over the
iterations in which the region's goroutine blocked exactly once (the
usual round trip): before it blocked (and the system-call time in that),
blocked, runnable to running, after it ran again (and its system-call
time). With both ranks' traces (their clock is the same monotonic clock)
it also splits rank 0's blocked time: its send's system call ending to
rank 1's goroutine being woken, rank 1's work up to its reply's system
call, that call starting to rank 0 being woken.
"""
import re
import statistics
import sys

EVENT = re.compile(r"^M=(-?\d+) P=(-?\d+) G=(-?\d+) (\w+) Time=(\d+)(.*)$")
TRANSITION = re.compile(r"(\w+->\w+)")


def load(path):
    """Returns {region type: [region]}; a region has t0, t1 and the state
    transitions (name, time) of its goroutine, on the monotonic clock."""
    events, offset = [], 0
    with open(path) as f:
        for line in f:
            m = EVENT.match(line)
            if not m:
                continue
            _, _, g, kind, t, rest = m.groups()
            if kind == "Sync":
                s = re.search(r"Trace=(\d+) Mono=(\d+)", rest)
                if s:
                    offset = int(s.group(2)) - int(s.group(1))
                continue
            events.append((int(t), int(g), kind, rest))
    regions, open_ = {}, {}
    for t, g, kind, rest in sorted(events):
        t += offset
        if kind in ("RegionBegin", "RegionEnd"):
            typ = re.search(r'Type="([^"]+)"', rest).group(1)
            if kind == "RegionBegin":
                open_[typ] = {"t0": t, "g": g, "ph": []}
            elif typ in open_:
                r = open_.pop(typ)
                r["t1"] = t
                regions.setdefault(typ, []).append(r)
            continue
        if kind != "StateTransition":
            continue
        who = re.search(r"GoID=(\d+)", rest)
        tr = TRANSITION.search(rest)
        if not who or not tr:
            continue
        for r in open_.values():
            if int(who.group(1)) == r["g"]:
                r["ph"].append((tr.group(1), t))
    return regions


def syscall_time(ph, a, b):
    total, start = 0, None
    for name, t in ph:
        if not a <= t <= b:
            continue
        if name == "Running->Syscall":
            start = t
        elif name == "Syscall->Running" and start is not None:
            total, start = total + t - start, None
    return total


def phases(regions):
    for typ, rs in regions.items():
        rows = []
        for r in rs:
            ph = r["ph"]
            sched = [p for p in ph if "Syscall" not in p[0]]
            if [p[0] for p in sched] != ["Running->Waiting", "Waiting->Runnable", "Runnable->Running"]:
                continue
            tb, tu, tr = (p[1] for p in sched)
            rows.append((tb - r["t0"], syscall_time(ph, r["t0"], tb), tu - tb, tr - tu,
                         r["t1"] - tr, syscall_time(ph, tr, r["t1"]), r["t1"] - r["t0"]))
        if not rows:
            print(f"  {typ}: no region blocked exactly once")
            continue
        med = [statistics.median(x[i] for x in rows) / 1e3 for i in range(7)]
        print(f"  {typ}: {len(rows)}/{len(rs)} iterations; median us: before {med[0]:.1f} (syscalls {med[1]:.1f}), "
              f"blocked {med[2]:.1f}, runnable {med[3]:.1f}, after {med[4]:.1f} (syscalls {med[5]:.1f}); whole {med[6]:.1f}")


def cross(r0s, r1s):
    for typ in r0s:
        rows = []
        for a, b in zip(r0s[typ], r1s.get(typ, [])):
            send_end = [t for s, t in a["ph"] if s == "Syscall->Running"]
            woken0 = [t for s, t in a["ph"] if s == "Waiting->Runnable"]
            woken1 = [t for s, t in b["ph"] if s == "Waiting->Runnable"]
            reply = [t for s, t in b["ph"] if s == "Running->Syscall"]
            if not (send_end and woken0 and woken1 and reply):
                continue
            s, w1, rp, w0 = send_end[0], woken1[0], reply[-1], woken0[-1]
            if s < w1 < rp < w0:
                rows.append((w1 - s, rp - w1, w0 - rp))
        if rows:
            med = [statistics.median(x[i] for x in rows) / 1e3 for i in range(3)]
            print(f"  {typ}: {len(rows)} iterations; median us: send done -> rank 1 woken {med[0]:.1f}, "
                  f"rank 1 working until its reply {med[1]:.1f}, reply -> rank 0 woken {med[2]:.1f}")


def main():
    traces = [load(p) for p in sys.argv[1:]]
    for i, regions in enumerate(traces):
        print(f"rank {i}:")
        phases(regions)
    if len(traces) == 2:
        print("rank 0 blocked, split:")
        cross(traces[0], traces[1])


if __name__ == "__main__":
    main()
