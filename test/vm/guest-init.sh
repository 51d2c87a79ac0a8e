#!/bin/bash
# guest-init.sh: runs as PID 1 inside a sparcml test guest (never on the host).
#
# vm.sh copies this file into the per-run control share (/run/sparcml-ctl),
# next to "config" (index, addresses, shares), "env" (exports for the command)
# and "cmd" (the command, shell-quoted). The image's own /sbin/sparcml-vm-init
# mounts that share and execs this script.
#
# It sets up soft-RoCE (rdma_rxe on eth0 as rxe0), runs the command with its
# output on the second serial port (ttyS1), writes the command's exit status to
# /run/sparcml-ctl/status and powers the guest off. PID 1 must never exit.
CTL=/run/sparcml-ctl
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH HOME=/root TERM=dumb LANG=C.UTF-8

say() { echo "sparcml-vm: $*" >/dev/console; }

poweroff_now() {
	sync
	echo o >/proc/sysrq-trigger
	sleep 3600
}

# setup_fail MSG: the set-up failed; report it as the command's output too.
setup_fail() {
	say "set-up failed: $*"
	echo "sparcml-vm: guest set-up failed: $*" >/dev/ttyS1 2>/dev/null
	echo 125 >"$CTL/status"
	poweroff_now
}

trap 'setup_fail "init interrupted"' ERR

# shellcheck source=/dev/null
. "$CTL/config"

mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t tmpfs -o mode=0755 tmpfs /run/shm 2>/dev/null || true
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null || true
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
hostname "$VM_HOSTNAME"
echo 1 >/proc/sys/kernel/sysrq

# Command output: second serial port, raw (no \n -> \r\n translation);
# a normal terminal for `vm.sh shell`.
if [ "${VM_INTERACTIVE:-0}" = 1 ]; then
	stty -F /dev/ttyS1 sane 115200 || setup_fail "no /dev/ttyS1"
else
	stty -F /dev/ttyS1 raw -echo 115200 || setup_fail "no /dev/ttyS1"
fi

# Shares from the host, each at the same path as on the host.
i=0
for s in "${VM_SHARES[@]}"; do
	mkdir -p "$s"
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,cache=none \
		"sparcml_share$i" "$s" || setup_fail "cannot mount share $s"
	i=$((i + 1))
done

# Soft-RoCE. There is no udev: load the verbs and CM modules by hand.
modprobe -a virtio_net rdma_rxe ib_uverbs rdma_ucm || setup_fail "modprobe failed"
for _ in $(seq 1 100); do
	[ -e /sys/class/net/eth0 ] && break
	sleep 0.1
done
[ -e /sys/class/net/eth0 ] || setup_fail "no eth0"
ip link set lo up
ip link set eth0 mtu "$VM_MTU" || setup_fail "cannot set MTU $VM_MTU on eth0"
ip addr add "$VM_IP" dev eth0
ip link set eth0 up
# rxe computes a CRC-32 over every packet it sends and receives, through the
# crypto API's best "crc32" at the time the link is added. Under TCG,
# crc32-pclmul (emulated carry-less multiplies) is the slow one: the
# table-driven crc32-generic is then used instead (VM_RXE_CRC=generic, the
# default under TCG; every RDMA program in the guest, perftest included,
# goes through the same rxe0, so comparisons stay fair).
if [ "${VM_RXE_CRC:-pclmul}" = generic ]; then
	modprobe crc32_generic 2>/dev/null || true # may be built in
	rmmod crc32_pclmul 2>/dev/null || true
else
	modprobe crc32_pclmul 2>/dev/null || true
fi
rdma link add rxe0 type rxe netdev eth0 || setup_fail "rdma link add rxe0 failed"
for _ in $(seq 1 100); do
	grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null &&
		[ -e /dev/infiniband/uverbs0 ] && break
	sleep 0.1
done
grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state || setup_fail "rxe0 port not ACTIVE"
[ -e /dev/infiniband/uverbs0 ] || setup_fail "no /dev/infiniband/uverbs0"
# The IPv4-mapped RoCEv2 GID (index 1) appears once the address is set.
for _ in $(seq 1 50); do
	grep -q 'RoCE v2' /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1 2>/dev/null && break
	sleep 0.1
done

# Two guests: wait until the peer answers, so neither command starts alone.
if [ -n "$VM_PEER" ]; then
	ok=0
	for _ in $(seq 1 120); do
		if ping -c 1 -W 1 "$VM_PEER" >/dev/null 2>&1; then
			ok=1
			break
		fi
	done
	[ $ok -eq 1 ] || setup_fail "peer $VM_PEER not reachable"
fi

ulimit -l unlimited # memory registration
ulimit -n 65536
trap - ERR
say "ready: $(uname -r), rxe0 on eth0 $VM_IP mtu $VM_MTU, crc32 ${VM_RXE_CRC:-pclmul}, uptime $(cut -d' ' -f1 /proc/uptime) s"

# shellcheck source=/dev/null
. "$CTL/env"
cd "$VM_CWD" || cd /
if [ "${VM_INTERACTIVE:-0}" = 1 ]; then
	# `vm.sh shell`: the host's terminal on ttyS1, job control included.
	setsid -c /bin/bash "$CTL/cmd" <>/dev/ttyS1 >&0 2>&1
	rc=$?
else
	# Through a pipe, so the command sees no terminal (as in CI: no progress
	# bars or colours), merged stdout and stderr in order.
	/bin/bash "$CTL/cmd" </dev/null 2>&1 | cat >/dev/ttyS1
	rc=${PIPESTATUS[0]}
fi
say "command exited with status $rc (uptime $(cut -d' ' -f1 /proc/uptime) s)"
echo "$rc" >"$CTL/status"
sync
for s in "${VM_SHARES[@]}"; do
	umount "$s" 2>/dev/null
done
poweroff_now
