#!/usr/bin/env python3
"""Prints the figures docs/PERFORMANCE.md quotes from one run of
scripts/perf.sh, given its JSON lines:

    bash scripts/perf.sh > bench/results/perf-sh-$(git rev-parse --short HEAD).jsonl
    scripts/perf-summary.py bench/results/perf-sh-<commit>.jsonl

The bench's rows do not say which of perf.sh's commands printed them
(warm-up, window, codec), so they are taken in perf.sh's order; a file of
another layout is refused. Ratios are of medians measured in the same run.
"""
import json
import statistics
import sys

# perf.sh's commands, in order: (name, number of JSON rows).
LAYOUT = [
    ("p2p-one-small", 6),  # 64-256 KiB, sparcml and raw-tcp per size
    ("p2p-one-large", 16),  # 512 KiB - 64 MiB
    ("p2p-window16", 14),  # 64 KiB - 4 MiB, 16 in flight
    ("allreduce-vs-mpi", 6),  # P = 2, 4, 8: sparcml, then Open MPI
    ("sparse-p4-warm40", 3),  # sparse (auto), dense, MPI allgatherv
    ("sparse-p4-warm3", 3),
    ("sparse-p8-forced", 7),  # auto, dsar, rabenseifner, ring, ssar-split, allgather, dense
    ("sparse-p4-bytes", 4),  # ssar-rd, ssar-split, dsar, allgather
    ("sparse-p4-powerlaw", 2),  # equal ranges, balanced
    ("q4-sparse", 6),  # none, q4, three times
    ("half-dense", 3),  # none, fp16, bf16
    ("overlap", 6),  # sleep, spin, three times
]


def split(rows):
    want = sum(n for _, n in LAYOUT)
    if len(rows) != want:
        sys.exit(f"{len(rows)} rows, not the {want} of scripts/perf.sh's current layout")
    out, i = {}, 0
    for name, n in LAYOUT:
        out[name] = rows[i : i + n]
        i += n
    return out


def kib(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def p2p_ratios(rows, window=1):
    # A row's bytes are an iteration's: window messages.
    ours = {r["bytes"] // window: r for r in rows if r.get("transport") == "tcp"}
    raw = {r["bytes"] // window: r for r in rows if r.get("transport") == "raw-tcp"}
    return [(b, raw[b]["time_us_median"] / ours[b]["time_us_median"], ours[b], raw[b]) for b in sorted(ours)]


def ms(r):
    return r["time_us_median"] / 1000


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
    s = split(rows)

    print("p2p over TCP, plain socket's median time / ours (> 1: faster than the socket)")
    for b, ratio, o, w in p2p_ratios(s["p2p-one-small"] + s["p2p-one-large"]):
        print(f"  one at a time {kib(b):>7}: {ratio:.2f}  ({o['time_us_median']:.0f} / {w['time_us_median']:.0f} us)")
    for b, ratio, _, _ in p2p_ratios(s["p2p-window16"], 16):
        print(f"  16 in flight  {kib(b):>7}: {ratio:.2f}")

    print("dense allreduce 16M float32 against Open MPI (TCP BTL)")
    ar = s["allreduce-vs-mpi"]
    for ours, mpi in zip(ar[0::2], ar[1::2]):
        print(f"  P={ours['np']}: {ours['algo_chosen']} {ms(ours):.1f} ms busbw {ours['busbw_gbps']:.2f} GB/s;"
              f" Open MPI {ms(mpi):.1f} ms busbw {mpi['busbw_gbps']:.2f} GB/s; ratio {ours['busbw_gbps'] / mpi['busbw_gbps']:.1f}x;"
              f" max RSS {ours['max_rss_bytes'] / 1e6:.0f} MB ({ours['max_rss_bytes'] / ours['bytes']:.2f}x the buffer)")

    print("sparse allreduce 16M, P=4, 1% uniform: auto against dense and MPI_Allgatherv + sum")
    for name in ("sparse-p4-warm40", "sparse-p4-warm3"):
        sp, dense, mpi = s[name]
        print(f"  {name}: auto ({sp['algo_chosen']}) {ms(sp):.1f} ms, dense {ms(dense):.1f} ms"
              f" ({ms(dense) / ms(sp):.1f}x), MPI {ms(mpi):.1f} ms (ours {ms(sp) / ms(mpi):.2f}x its time)")

    print("sparse allreduce 16M, P=8, 10%: every algorithm forced")
    forced = s["sparse-p8-forced"]
    dense = forced[-1]
    best = min(forced[1:-1], key=ms)
    for r in forced[:-1]:
        print(f"  {r['algo']:>12} ({r['algo_chosen']}): {ms(r):.1f} ms, {r['bytes_sent_per_rank']} B/rank")
    print(f"  dense allreduce: {ms(dense):.1f} ms; auto {ms(forced[0]) / ms(best):.2f}x the best forced ({best['algo']}),"
          f" {ms(forced[0]) / ms(dense):.2f}x dense")

    print("bytes per rank against the model, P=4, 16M, 1% (measured, predicted, error); time")
    for r in s["sparse-p4-bytes"] + [s["sparse-p8-forced"][1]]:
        m, p = r["bytes_sent_per_rank"], r["predicted_bytes_per_rank"]
        print(f"  P={r['np']} {r['algo']:>10}: {m} {p} {100 * (m - p) / p:+.3f}%  {ms(r):.1f} ms")

    eq, bal = s["sparse-p4-powerlaw"]
    print(f"power-law support, ssar-split: equal ranges {eq['bytes_sent_per_rank'] / 1e6:.2f} MB from the busiest rank"
          f" (model {eq['predicted_bytes_per_rank'] / 1e6:.2f}) in {ms(eq):.1f} ms;"
          f" balanced {bal['bytes_sent_per_rank'] / 1e6:.2f} MB in {ms(bal):.1f} ms")

    q = s["q4-sparse"]
    pairs = list(zip(q[0::2], q[1::2]))
    ratios = [ms(b) / ms(a) for a, b in pairs]
    print("q4 sparse against float32 (three alternated rounds): " + " / ".join(f"{ms(a):.1f}:{ms(b):.1f} ms = {x:.2f}" for (a, b), x in zip(pairs, ratios))
          + f"; median {statistics.median(ratios):.2f}; bytes {pairs[0][1]['bytes_sent_per_rank'] / pairs[0][0]['bytes_sent_per_rank']:.2f}x")

    f32, fp16, bf16 = s["half-dense"]
    print(f"dense allreduce 16M, P=4: float32 {ms(f32):.1f} ms, fp16 {ms(fp16):.1f} ms ({ms(fp16) / ms(f32):.2f}x),"
          f" bf16 {ms(bf16):.1f} ms ({ms(bf16) / ms(f32):.2f}x)")

    ov = s["overlap"]
    print("4 allreduces of 1M in flight, both / (comm + compute): sleep "
          + " / ".join(f"{r['overlap_ratio']:.2f}" for r in ov[0::2]) + ", spin " + " / ".join(f"{r['overlap_ratio']:.2f}" for r in ov[1::2]))


if __name__ == "__main__":
    main()
