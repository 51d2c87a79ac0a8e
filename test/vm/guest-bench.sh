#!/bin/bash
# guest-bench.sh: RDMA benchmarks inside one soft-RoCE guest (make bench-rdma).
#
#   test/vm/vm.sh run -- test/vm/guest-bench.sh
#
# 1. perftest's ib_write_bw (server and client on rxe0, 64 KiB..4 MiB), the
#    reference for what soft-RoCE in this guest can do;
# 2. sparcml bench --op p2p over RDMA, same sizes;
# 3. the dense allreduce bench over RDMA and over TCP.
# Under TCG these numbers only compare with each other, in the same run.
#
# Environment: SPARCML_BIN (default <checkout>/bin/sparcml), BENCH_ITERS,
# BENCH_RANKS (allreduce ranks, default 2), BENCH_SIZES_BYTES.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=${SPARCML_BIN:-$root/bin/sparcml}
DEV=${SPARCML_IB_DEV:-rxe0}
IP=${SPARCML_VM_IP:-127.0.0.1}
ITERS=${BENCH_ITERS:-20}
RANKS=${BENCH_RANKS:-2}
read -r -a SIZES <<<"${BENCH_SIZES_BYTES:-65536 262144 1048576 4194304}"
# sparcml bench sizes are float32 element counts: bytes / 4.
first=$((SIZES[0] / 4))
last=$((SIZES[${#SIZES[@]} - 1] / 4))
status=0

wait_port() { # port: until a TCP listener exists (perftest's OOB channel)
	for _ in $(seq 1 100); do
		ss -Hltn "sport = :$1" | grep -q . && return 0
		sleep 0.1
	done
	return 1
}

echo "== guest $(hostname): $(uname -r), $(nproc) vCPUs; $DEV on eth0 $IP, MTU $(cat /sys/class/net/eth0/mtu)"
ibv_devinfo -d "$DEV" | grep -E 'hca_id|state|active_mtu|link_layer'

echo
echo "== perftest ib_write_bw on $DEV (server and client in this guest, GID index 1)"
port=18515
header=0
for size in "${SIZES[@]}"; do
	# About 64 MiB per size, at least 32 iterations (with very few, perftest
	# under TCG now and then reports 0.00 MB/s).
	n=$(((64 << 20) / size))
	[ $n -lt 32 ] && n=32
	ib_write_bw -d "$DEV" -x 1 -F -s "$size" -n "$n" -p "$port" >/tmp/perftest-server.log 2>&1 &
	spid=$!
	if ! wait_port "$port"; then
		echo "ib_write_bw server did not start:"
		cat /tmp/perftest-server.log
		status=1
		kill $spid 2>/dev/null
		continue
	fi
	if timeout 120 ib_write_bw -d "$DEV" -x 1 -F -s "$size" -n "$n" -p "$port" "$IP" >/tmp/perftest-client.log 2>&1; then
		if [ $header -eq 0 ]; then
			grep -m1 '#bytes' /tmp/perftest-client.log
			header=1
		fi
		grep -E '^[[:space:]]*[0-9]+[[:space:]]+[0-9]+' /tmp/perftest-client.log
	else
		echo "ib_write_bw -s $size failed:"
		cat /tmp/perftest-client.log /tmp/perftest-server.log
		status=1
	fi
	wait $spid 2>/dev/null
	port=$((port + 1))
done

if [ ! -x "$BIN" ]; then
	echo
	echo "== $BIN not built: skipping the sparcml benchmarks (make build)"
	exit $status
fi

run() {
	echo
	echo "== $*"
	timeout 600 "$@" || {
		echo "FAILED (exit $?): $*"
		status=1
	}
}

run "$BIN" bench -n 2 --op p2p --transport rdma --sizes "$first:$last" --iters "$ITERS" --warmup 3
run "$BIN" bench -n "$RANKS" --op allreduce --transport rdma --sizes "$first:$last" --iters "$ITERS" --warmup 3 --check
run "$BIN" bench -n "$RANKS" --op allreduce --transport tcp --sizes "$first:$last" --iters "$ITERS" --warmup 3 --check
exit $status
