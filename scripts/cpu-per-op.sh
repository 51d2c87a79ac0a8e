#!/usr/bin/env bash
# Prints the CPU time (user + system, all ranks together) and the minor
# page faults of one operation of a `sparcml bench` run, as the difference
# between two runs that differ only in --iters, so that start-up, input
# generation and calibration cancel out. A loaded machine distorts CPU time
# far less than wall time. Usage:
#   scripts/cpu-per-op.sh [-b BIN] BENCH-ARGS...
# e.g. scripts/cpu-per-op.sh -n 4 --op sparse-allreduce --sizes 16M --density 0.1 --algo dsar
set -euo pipefail
B=bin/sparcml
if [[ ${1:-} == -b ]]; then B=$2; shift 2; fi
LO=${LO:-2} HI=${HI:-12}
run() {
	/usr/bin/time -f "%U %S %R" "$B" bench "$@" --format json 2>&1 >/dev/null | tail -1
}
a=$(run "$@" --iters "$LO" --warmup 1)
b=$(run "$@" --iters "$HI" --warmup 1)
echo "$a $b" | awk -v n=$((HI - LO)) '{printf "cpu_ms_per_op=%.1f minor_faults_per_op=%.0f\n", ($4+$5-$1-$2)*1000/n, ($6-$3)/n}'
