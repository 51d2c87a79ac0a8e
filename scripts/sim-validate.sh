#!/usr/bin/env bash
# The simulator against the emulated cluster (docs/SIMULATION.md,
# "Validation against the emulated cluster"): every 1 Gbit/s case of 4 and 8
# hosts (dense allreduce of 16M float32, the exact sparse allreduce at 1%
# uniform; auto and every forced algorithm) simulated with the calibration
# its own job measured, next to the measured median.
#
#   scripts/sim-validate.sh           # compares bench/results/cluster.jsonl (make bench-cluster)
#   scripts/sim-validate.sh --bench   # first measures the cases on the emulated cluster (root)
#
# Output: bench/results/sim-validate.{jsonl,md}; with --bench, the cluster's
# rows in bench/results/sim-validate-cluster.jsonl and the comparison in
# bench/results/sim-validate-rerun.{jsonl,md}. ROUNDS (default 3) and ITERS
# (default 7) shape the measurement.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bin bench/results
go build -o bin/sparcml ./cmd/sparcml
in=bench/results/cluster.jsonl out=bench/results/sim-validate
if [[ ${1:-} == --bench ]]; then
	in=bench/results/sim-validate-cluster.jsonl out=bench/results/sim-validate-rerun
	go build -o bin/benchcluster ./test/cluster/benchcluster
	: >"$in"
	for hosts in 4 8; do
		# One cluster at a time: the emulated cluster is one machine's.
		flock /tmp/sparcml-cluster.lock bin/benchcluster -sparcml bin/sparcml -no-mpi -hosts "$hosts" -rates 1gbit \
			-densities 0.01 -dists uniform -quants none -sparse-algos ssar-rd,ssar-split,dsar,allgather,auto \
			-iters "${ITERS:-7}" -warmup 1 -rounds "${ROUNDS:-3}" -out "$in.$hosts"
		cat "$in.$hosts" >>"$in"
		rm "$in.$hosts"
	done
fi
SPARCML=bin/sparcml nice -n 19 python3 scripts/sim-validate.py "$in" >"$out.jsonl" 2>"$out.md"
cat "$out.md"
