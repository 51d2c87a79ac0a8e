#!/usr/bin/env python3
"""Simulates every sparcml case of an emulated-cluster run and compares the
simulated time with the measured median (docs/SIMULATION.md, "Validation
against the emulated cluster"):

    scripts/sim-validate.py CLUSTER.jsonl... > sim-validate.jsonl 2> sim-validate.md

CLUSTER.jsonl are test/cluster/benchcluster's JSON lines (make bench-cluster's
bench/results/cluster.jsonl, or scripts/sim-validate.sh --bench's). Each
sparcml row of the validation's cases (1 Gbit/s, one rank per host: dense
allreduce; the exact sparse allreduce at 1% uniform, index wire chosen by
auto) is simulated by `sparcml sim` with the calibration its own job measured
at start-up (the row's cost_model, given to --calibration), P = the row's
hosts on a flat network (the emulated hosts' tbf-shaped links), the same
operation, size, density, distribution, algorithm and index wire, twice:

- model: --compute model, every rank on a core of its own;
- measured: --compute measured --cores C, C the machine's cores (the row's
  cpus), since the emulated hosts all run on that one machine.

Prints one JSON line per row and mode on stdout, and on stderr a Markdown
table of every case: the median over rounds of the measured medians, of the
simulated times, and their ratio. SPARCML (default bin/sparcml) is the CLI.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile


def modes(row):
    return {
        "model": ["--compute", "model"],
        "measured": ["--compute", "measured", "--cores", str(row["cpus"])],
    }


def sim(binary, row, flags):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"cost_model": row["cost_model"]}, f)
        calib = f.name
    try:
        args = [
            binary,
            "sim",
            "-n",
            str(row["hosts"]),
            "--calibration",
            calib,
            "--format",
            "json",
            "--op",
            row["op"],
            "--sizes",
            str(row["n"]),
            "--algo",
            row["algo"],
        ]
        if row["op"] == "sparse-allreduce":
            args += [
                "--density",
                str(row["density"]),
                "--dist",
                row.get("dist", "uniform"),
                "--quant",
                row.get("quant", "none"),
            ]
            if row.get("indices"):
                args += ["--indices", row["indices"]]  # the wire the measured job chose
        out = subprocess.run(
            args + flags, check=True, capture_output=True, text=True
        ).stdout
    finally:
        os.unlink(calib)
    return next(json.loads(line) for line in out.splitlines() if line.startswith("{"))


def wanted(row):
    """The cases of the validation: dense allreduce, and the exact sparse
    allreduce at 1% uniform with the index wire auto chose, at 1 Gbit/s."""
    if (
        row.get("system") != "sparcml"
        or "cost_model" not in row
        or row.get("rate") != "1gbit"
        or row.get("ranks_per_host") != 1
    ):
        return False
    if row["op"] == "allreduce":
        return True
    return (
        row["op"] == "sparse-allreduce"
        and row.get("density") == 0.01
        and row.get("dist") == "uniform"
        and row.get("quant") == "none"
        and not row.get("indices_forced")
        and row["algo"] != "auto-tensor"
    )


def case_of(r):
    if r["op"] == "allreduce":
        return (
            r["hosts"],
            "dense 16M" if r["n"] == 16 << 20 else f"dense {r['n']}",
            r["algo"],
        )
    return (r["hosts"], f"sparse {r['density']:.0%} {r['dist']}", r["algo"])


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = os.environ.get("SPARCML", "bin/sparcml")
    cases = {}
    rows = []
    for path in sys.argv[1:]:
        with open(path) as f:
            rows += [json.loads(line) for line in f]
    for row in rows:
        if not wanted(row):
            continue
        c = cases.setdefault(
            case_of(row),
            {"measured": [], "chosen": [], "model": [], "measured_sim": []},
        )
        c["measured"].append(row["time_us_median"])
        c["chosen"].append(row["algo_chosen"])
        for mode, flags in modes(row).items():
            s = sim(binary, row, flags)
            if s["bytes_sent_per_rank"] != row["bytes_sent_per_rank"]:
                print(
                    f"warning: {case_of(row)} round {row.get('round')}: simulated bytes per rank {s['bytes_sent_per_rank']}, "
                    f"measured {row['bytes_sent_per_rank']}",
                    file=sys.stderr,
                )
            c["model" if mode == "model" else "measured_sim"].append(s["sim_time_us"])
            out = {
                k: row.get(k)
                for k in (
                    "hosts",
                    "ranks_per_host",
                    "rate",
                    "op",
                    "n",
                    "algo",
                    "algo_chosen",
                    "density",
                    "dist",
                    "indices",
                    "round",
                    "load",
                    "cost_model",
                    "cpus",
                )
            }
            out.update(
                mode=mode,
                sim_flags=" ".join(flags),
                measured_us=row["time_us_median"],
                sim_us=s["sim_time_us"],
                sim_algo=s["algo_chosen"],
                bytes_sent_per_rank=row["bytes_sent_per_rank"],
                sim_bytes_sent_per_rank=s["bytes_sent_per_rank"],
                ratio=round(s["sim_time_us"] / row["time_us_median"], 3),
            )
            print(json.dumps(out), flush=True)
    table(cases)


def table(cases):
    w = sys.stderr.write
    w(
        "| hosts | case | algorithm | measured (ms) | model (ms) | model / measured | measured compute, shared cores (ms) | ratio |\n"
    )
    w("|---:|---|---|---:|---:|---:|---:|---:|\n")
    for (hosts, case, algo), c in cases.items():
        m, a, b = (
            statistics.median(c[k]) for k in ("measured", "model", "measured_sim")
        )
        if algo == "auto":
            algo = "auto (" + ", ".join(sorted(set(c["chosen"]))) + ")"
        w(
            f"| {hosts} | {case} | {algo} | {m / 1e3:.1f} | {a / 1e3:.1f} | {a / m:.2f} | {b / 1e3:.1f} | {b / m:.2f} |\n"
        )


if __name__ == "__main__":
    main()
