#!/bin/bash
# guest-2vm.sh: the two-guest smoke test (make test-rdma-2vm). Runs in both
# guests of `vm.sh run2`; guest 0 (10.199.0.1) is the perftest server and
# sparcml rank 0, guest 1 the client and rank 1.
#
#   test/vm/vm.sh run2 -- test/vm/guest-2vm.sh -- test/vm/guest-2vm.sh
#
# 1. ib_write_bw across the link (proves RoCE between two kernels);
# 2. sparcml bench --op p2p and --op allreduce --check over RDMA with one
#    rank per guest (SPARCML_RANK/SIZE/ADDR, i.e. the bootstrap a real
#    multi-host job uses), if bin/sparcml is built;
# 3. VM_2VM_TEST, if set: a shell command line (e.g. a host-built test binary
#    with its flags) run with bash -c in both guests with that same rank
#    environment (SPARCML_RANK=0/1, SPARCML_SIZE=2, SPARCML_ADDR=10.199.0.1:29652).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BIN=${SPARCML_BIN:-$root/bin/sparcml}
DEV=${SPARCML_IB_DEV:-rxe0}
idx=${SPARCML_VM_INDEX:?run me through vm.sh run2}
me=$SPARCML_VM_IP
peer=$SPARCML_VM_PEER_IP
server=$([ "$idx" = 0 ] && echo "$me" || echo "$peer")
status=0

step() { echo "== [guest $idx] $*"; }

# retry N CMD...: run CMD up to N times, a second apart, until it succeeds.
retry() {
	local n=$1
	shift
	for _ in $(seq 1 "$n"); do
		"$@" && return 0
		sleep 1
	done
	return 1
}

step "$(uname -r); $DEV on eth0 $me (peer $peer), MTU $(cat /sys/class/net/eth0/mtu)"

# The perftest server takes exactly one connection: the client starts only
# once the server listens, signalled through the run's shared directory.
step "ib_write_bw 64 KiB across the link"
ready=${SPARCML_VM_SHARED:?run me through vm.sh run2}/perftest-ready
if [ "$idx" = 0 ]; then
	timeout 180 ib_write_bw -d "$DEV" -x 1 -F -s 65536 -n 200 -p 18600 &
	srv=$!
	retry 60 sh -c 'ss -Hltn "sport = :18600" | grep -q .' && touch "$ready"
	wait $srv || status=1
else
	if retry 120 test -e "$ready"; then
		timeout 180 ib_write_bw -d "$DEV" -x 1 -F -s 65536 -n 200 -p 18600 "$server" || status=1
	else
		echo "perftest server in guest 0 never became ready"
		status=1
	fi
fi

export SPARCML_RANK=$idx SPARCML_SIZE=2 SPARCML_ADDR=$server:29650
export SPARCML_TOKEN=${SPARCML_TOKEN:-sparcml-vm-2vm} SPARCML_IFNAME=eth0
if [ -x "$BIN" ]; then
	step "sparcml bench p2p over RDMA, rank $idx of 2"
	timeout 600 "$BIN" bench --op p2p --transport rdma --sizes 16K:256K --iters 10 --warmup 2 || status=1
	export SPARCML_ADDR=$server:29651
	step "sparcml bench allreduce --check over RDMA, rank $idx of 2"
	timeout 600 "$BIN" bench --op allreduce --transport rdma --sizes 1K:1M --iters 5 --warmup 1 --check || status=1
else
	step "$BIN not built: skipping the sparcml runs"
fi

if [ -n "${VM_2VM_TEST:-}" ]; then
	export SPARCML_ADDR=$server:29652
	step "VM_2VM_TEST: $VM_2VM_TEST"
	timeout 900 bash -c "$VM_2VM_TEST" || status=1
fi
step "exit $status"
exit $status
