#!/usr/bin/env bash
# Alternates `sparcml bench -n 2 --op p2p --baseline` between variants, so
# that a shared machine's slow and fast stretches hit every variant alike,
# and prints each run's ratios to the plain socket (raw time / our time,
# by message size) and then, per variant and size, the median over the
# rounds. A variant is NAME=COMMAND, COMMAND a sparcml binary with any
# environment in front. Usage:
#   scripts/ab-p2p.sh ROUNDS "BENCH-ARGS" NAME=COMMAND...
# e.g.
#   scripts/ab-p2p.sh 12 "--sizes 16K:64K --iters 200" \
#     system="env SPARCML_TCP_CONGESTION=system bin/sparcml" auto=bin/sparcml
set -euo pipefail
# The comparison is with a TCP socket: on one host the default transport
# is shared memory.
export SPARCML_TRANSPORT=${SPARCML_TRANSPORT:-tcp}
rounds=$1 args=$2
shift 2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
	for v in "$@"; do
		name=${v%%=*} cmd=${v#*=}
		# shellcheck disable=SC2086 # the command and the arguments split on purpose
		$cmd bench -n 2 --op p2p $args --baseline --format csv 2>/dev/null |
			awk -F, -v name="$name" '
				/^p2p/ { if ($4 == "raw-tcp") raw[$8] = $10; else ours[$8] = $10 }
				END { for (b in ours) if (raw[b] > 0) printf "%s %d %.3f %.1f %.1f\n", name, b, raw[b] / ours[b], ours[b], raw[b] }'
	done | tee -a "$out"
done
echo "# variant, message bytes, median ratio over $rounds rounds (raw/ours; > 1: faster than the plain socket), median us ours/raw"
sort -k1,1 -k2,2n "$out" | awk '
	function med(a, n,   i, j, t) {
		for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
		return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
	}
	function flush() { if (n) printf "%-10s %9d  %.3f  %.0f/%.0f\n", key1, key2, med(r, n), med(o, n), med(w, n); n = 0 }
	{ if ($1 != key1 || $2 != key2) { flush(); key1 = $1; key2 = $2 } n++; r[n] = $3; o[n] = $4; w[n] = $5 }
	END { flush() }'
