#!/usr/bin/env bash
# run-explicit.sh PROGRAM N: starts N ranks of the C test program by hand,
# each joining through sparcml_init_with (rank, size, address and token on
# its command line, no launcher environment), and fails unless all exit 0.
# Bounded: every rank is killed after 3 minutes.
set -euo pipefail
prog=$1 n=$2
port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
pids=()
for ((r = 0; r < n; r++)); do
	env -u SPARCML_RANK -u SPARCML_SIZE -u SPARCML_ADDR -u SPARCML_TOKEN \
		SPARCML_DEBUG=NONE SPARCML_TIMEOUT=60s \
		timeout 180 "$prog" --rank "$r" --size "$n" --addr "127.0.0.1:$port" --token "$token" &
	pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
	wait "$pid" || status=1
done
exit $status
