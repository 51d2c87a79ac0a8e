#!/usr/bin/env bash
# Runs the measurements quoted in docs/PERFORMANCE.md, side by side in one
# run, and prints JSON lines (one per measurement) to stdout:
#
#   bash scripts/perf.sh > bench/results/perf-sh-$(git rev-parse --short HEAD).jsonl
#
# Needs bin/sparcml (make build) and, for the Open MPI peers, openmpi-bin
# and libopenmpi-dev (make -C bench/mpi). ITERS sets the timed iterations
# of most runs (default 20).
#
# Sparse comparisons run after 40 warm-up operations (the MPI peer too),
# the steady state a training job lives in, and again after 3, which
# includes a new communicator's first operations (pooled buffers growing
# to the messages' sizes; docs/PERFORMANCE.md, "Sparse allreduce and
# auto's choice", and docs/DEFAULTS.md, "Receive headroom").
set -euo pipefail
cd "$(dirname "$0")/.."
B=bin/sparcml
ITERS=${ITERS:-20}
# The figures are TCP's: on one host the default transport is shared memory.
export SPARCML_TRANSPORT=${SPARCML_TRANSPORT:-tcp}
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl tcp,self --mca btl_tcp_if_include lo --mca pml ob1"
j() { "$B" bench --format json --iters "$ITERS" --warmup 3 "$@"; }
jw() { "$B" bench --format json --iters "$ITERS" --warmup 40 "$@"; }

echo "# p2p vs plain Go TCP socket copy (iterations interleaved): one message, then 16 in flight" >&2
# Small messages take microseconds and the machine's noise comes in bursts
# of milliseconds: they get more iterations, so the medians see through it.
j -n 2 --op p2p --sizes 16K:64K --baseline --iters 400
j -n 2 --op p2p --sizes 128K:16M --baseline --iters 40
j -n 2 --op p2p --sizes 16K:1M --baseline --window 16 --iters 60

echo "# dense allreduce 16M float32 vs Open MPI (TCP BTL)" >&2
for p in 2 4 8; do
	j -n $p --op allreduce --sizes 16M
	$MPIRUN -np $p bench/mpi/allreduce 16777216 "$ITERS" 3
done

echo "# sparse allreduce, P=4, 16M, uniform 1%: auto vs dense vs Open MPI allgatherv" >&2
jw -n 4 --op sparse-allreduce --sizes 16M --density 0.01 --vs-dense
$MPIRUN -np 4 bench/mpi/sparse_allgatherv 16777216 0.01 "$ITERS" 40
j -n 4 --op sparse-allreduce --sizes 16M --density 0.01 --vs-dense
$MPIRUN -np 4 bench/mpi/sparse_allgatherv 16777216 0.01 "$ITERS" 3

echo "# sparse allreduce, P=8, 16M, uniform 10%: auto vs every forced algorithm vs dense" >&2
for a in auto dsar rabenseifner ring ssar-split allgather; do
	j -n 8 --op sparse-allreduce --sizes 16M --density 0.1 --algo "$a" --iters 7 --warmup 5
done
j -n 8 --op allreduce --sizes 16M --iters 7 --warmup 5

echo "# bytes per rank vs the model, each algorithm, P=4, 16M, 1%" >&2
for a in ssar-rd ssar-split dsar allgather; do
	j -n 4 --op sparse-allreduce --sizes 16M --density 0.01 --algo "$a" --iters 3 --warmup 1
done

echo "# balanced vs equal ranges on a power-law support, P=4" >&2
jw -n 4 --op sparse-allreduce --sizes 16M --density 0.01 --dist powerlaw --algo ssar-split
jw -n 4 --op sparse-allreduce --sizes 16M --density 0.01 --dist powerlaw --algo ssar-split --balanced

echo "# low precision: q4 sparse and fp16/bf16 dense vs float32" >&2
for _ in 1 2 3; do # alternated: the ratio is noisy
	for q in none q4; do
		jw -n 4 --op sparse-allreduce --sizes 16M --density 0.01 --quant $q
	done
done
for q in none fp16 bf16; do
	j -n 4 --op allreduce --sizes 16M --quant $q --iters 10
done

echo "# overlap: 4 allreduces in flight, compute = communication time" >&2
for _ in 1 2 3; do
	j -n 4 --op allreduce --sizes 1M --inflight 4 --compute-mode sleep --iters 10
	j -n 4 --op allreduce --sizes 1M --inflight 4 --compute-mode spin --iters 10
done
