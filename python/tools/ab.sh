#!/usr/bin/env bash
# ab.sh ROUNDS NP SIZE ITERS: alternates, ROUNDS times, the same blocking
# float32 allreduce of SIZE elements (K, M suffixes x1024) on NP local ranks
# timed from Go (capi/bench; and locked to its thread, as a call from C
# runs), from C (capi/cbench) and from Python (python/tools/bench.py)
# through the C ABI, and by `sparcml bench`; prints each run's median (the
# slowest rank's time per iteration) as a JSON line, then the medians of
# the rounds. Alternating spreads a shared machine's noise over all of
# them. Run from the repository root after `make build lib`.
set -euo pipefail
rounds=$1 np=$2 size=$3 iters=$4
warmup=$((iters / 10 + 1))
elems=$(/usr/bin/python3 -c "s='$size'; print(int(s[:-1]) * {'K': 1024, 'M': 1 << 20}[s[-1]] if s[-1] in 'KM' else int(s))")
mkdir -p build/test
go build -o build/test/gobench ./capi/bench
cc -O2 -Iinclude -o build/test/cbench capi/cbench/bench.c -Lbuild/lib -lsparcml -Wl,-rpath,"$PWD/build/lib"
export SPARCML_DEBUG=NONE PYTHONPATH=python
run() { bin/sparcml run -n "$np" --no-prefix -- "$@"; }
out=$(mktemp)
for ((r = 1; r <= rounds; r++)); do
	{
		run build/test/gobench --sizes "$elems" --iters "$iters" --warmup "$warmup"
		run build/test/gobench --sizes "$elems" --iters "$iters" --warmup "$warmup" --locked
		run build/test/cbench "$iters" "$elems"
		run /usr/bin/python3 python/tools/bench.py --sizes "$elems" --iters "$iters" --warmup "$warmup"
		bin/sparcml bench -n "$np" --op allreduce --sizes "$elems" --iters "$iters" --warmup "$warmup" --format json |
			sed 's/^{/{"binding":"sparcml-bench",/'
	} | sed "s/^{/{\"round\":$r,/" | tee -a "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for b in dict.fromkeys(r["binding"] for r in rows):
    med[b] = statistics.median(r["time_us_median"] for r in rows if r["binding"] == b)
    print("median of %d rounds: %-14s %10.1f us" % (len(rows) // len(set(r["binding"] for r in rows)), b, med[b]))
for b in ("c", "python", "sparcml-bench"):
    for ref in ("go", "go-locked", "c", "sparcml-bench"):
        if b != ref and b in med and ref in med:
            print("%s - %s: %+.1f us, ratio %.3f" % (b, ref, med[b] - med[ref], med[b] / med[ref]))
PY
rm -f "$out"
