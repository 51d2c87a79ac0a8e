#!/usr/bin/env bash
# vm.sh: QEMU soft-RoCE guest harness for sparcml.
#
# Builds a Debian guest image once (debootstrap + mke2fs -d, no loop mounts),
# boots throw-away guests under QEMU (TCG unless usable KVM), loads rdma_rxe on
# eth0 as rxe0, runs one command in each guest with the checkout mounted over
# 9p at the same path as on the host, and returns the command's exit status.
#
#   vm.sh image                                  build the guest image (cached)
#   vm.sh run  [OPTS] -- CMD [ARGS...]           one guest
#   vm.sh run2 [OPTS] -- CMD_A [ARGS...] -- CMD_B [ARGS...]
#                                                two guests on one virtual link
#   vm.sh shell [OPTS] [-- CMD...]               interactive shell in a guest (debugging)
#   vm.sh deps [PKG...]                          apt-get install what the host lacks
#   vm.sh info                                   print the configuration
#   vm.sh clean                                  remove the cache directory
#
# See test/vm/README.md for the details and the environment variables.
set -euo pipefail

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$VM_DIR/../.." && pwd)

# ---- configuration (environment) -------------------------------------------
# The image depends only on Debian's packages, not on the checkout: as root
# it is kept in /var/cache so fresh clones on the same machine (CI) reuse it.
if [ -z "${SPARCML_VM_CACHE:-}" ] && [ "$(id -u)" = 0 ] && mkdir -p /var/cache/sparcml-vm 2>/dev/null; then
	SPARCML_VM_CACHE=/var/cache/sparcml-vm
fi
VM_CACHE=${SPARCML_VM_CACHE:-$REPO_ROOT/test/vm/cache}
VM_SUITE=${SPARCML_VM_SUITE:-bookworm}
VM_MIRROR=${SPARCML_VM_MIRROR:-}
VM_TIMEOUT=${SPARCML_VM_TIMEOUT:-1200}       # seconds, per guest run
VM_MEM=${SPARCML_VM_MEM:-1024}               # MiB
VM_SMP=${SPARCML_VM_SMP:-2}
VM_ACCEL=${SPARCML_VM_ACCEL:-auto}           # auto | tcg | kvm
VM_MTU=${SPARCML_VM_MTU:-9000}
# CRC-32 implementation rxe uses for its ICRC (every packet, both sides):
# generic (table-driven) | pclmul | auto (generic under TCG, whose
# emulation of pclmulqdq makes crc32-pclmul the slower one, see README).
VM_RXE_CRC=${SPARCML_VM_RXE_CRC:-auto}
VM_LINK=${SPARCML_VM_LINK:-socket}           # run2 link: socket (lossless) | udp (lossy)
VM_NET=${SPARCML_VM_NET:-10.199.0}           # guests get .1 and .2 (/24)
VM_VERBOSE=${SPARCML_VM_VERBOSE:-0}          # 1: stream the guest console too
VM_KEEP=${SPARCML_VM_KEEP:-0}                # 1: keep the per-run directory
VM_INTERACTIVE=0                             # vm.sh shell
VM_PEER_GRACE=${SPARCML_VM_PEER_GRACE:-30}   # run2: seconds the survivor gets

# Bump when the image contents change in a way the package list does not show.
IMAGE_VERSION=4
KERNEL_PACKAGE=linux-image-amd64 # installed after debootstrap, see cmd_image
GUEST_PACKAGES=(
	kmod iproute2 iputils-ping procps util-linux
	rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
	ca-certificates
)
HOST_PACKAGES=(qemu-system-x86 debootstrap e2fsprogs coreutils util-linux)

IMAGE=$VM_CACHE/rootfs.ext4
KERNEL=$VM_CACHE/vmlinuz
INITRD=$VM_CACHE/initrd.img
STAMP=$VM_CACHE/image.stamp

log() { printf 'vm.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

# ---- host dependencies -----------------------------------------------------
_apt_updated=0
ensure_host_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	[ "$(id -u)" -eq 0 ] || die "missing host packages (${missing[*]}); install them or run as root"
	log "installing host packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	local i
	for i in 1 2 3; do
		if [ $_apt_updated -eq 1 ] || apt-get update -q; then
			_apt_updated=1
			apt-get install -y -q --no-install-recommends "${missing[@]}" && return 0
		fi
		log "apt-get failed (attempt $i), retrying"
		sleep $((i * 10))
	done
	die "could not install ${missing[*]}"
}

# ---- mirror ----------------------------------------------------------------
# The Debian mirror the host's apt uses (deb822 and one-line formats), so the
# image builds wherever the host can install packages.
detect_mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -r "$f" ] || continue
		while read -r uri; do
			case "$uri" in
			*security*) ;;
			http://*/debian | http://*/debian/ | https://*/debian | https://*/debian/)
				echo "${uri%/}"
				return 0
				;;
			esac
		done < <(sed -n -e 's/^URIs:[[:space:]]*//p' -e 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' "$f" | tr ' ' '\n')
	done
	echo "http://deb.debian.org/debian"
}

# ---- image -----------------------------------------------------------------
# The image's own init: mount the basics and the per-run control share, then
# hand over to the guest-init.sh copied there by the host. Kept minimal so the
# harness logic can change without rebuilding the image.
STUB_INIT='#!/bin/sh
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# The initramfs has moved /proc, /sys and /dev here already.
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
modprobe -a 9pnet_virtio 9p
mkdir -p /run/sparcml-ctl
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 sparcml_ctl /run/sparcml-ctl &&
	[ -x /run/sparcml-ctl/init ]; then
	exec /run/sparcml-ctl/init
fi
echo "sparcml-vm: cannot mount the control share; powering off" >/dev/console
echo o >/proc/sysrq-trigger
sleep 3600
'

# init_cache: the cache directory, marked as a separate Go module so that
# `go ... ./...` in the checkout never walks into it.
init_cache() {
	mkdir -p "$VM_CACHE"
	[ -f "$VM_CACHE/go.mod" ] || echo "module ignore/vmcache" >"$VM_CACHE/go.mod"
}

# remove_tree DIR: delete a (possibly half-built) root tree without ever
# following a mount debootstrap may have left inside it (/proc, /sys, /dev).
remove_tree() {
	local d=$1 m
	[ -n "$d" ] && [ -d "$d" ] || return 0
	while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done < <(awk -v p="$d/" 'index($2, p) == 1 { print $2 }' /proc/mounts | sort -r)
	rm -rf --one-file-system "$d"
}

image_stamp() {
	printf '%s\n' "$IMAGE_VERSION" "$VM_SUITE" "$KERNEL_PACKAGE" "${GUEST_PACKAGES[*]}" "$STUB_INIT" | sha256sum | cut -d' ' -f1
}

image_ok() {
	[ -s "$IMAGE" ] && [ -s "$KERNEL" ] && [ -s "$INITRD" ] && [ -f "$STAMP" ] &&
		[ "$(cat "$STAMP")" = "$(image_stamp)" ]
}

cmd_image() {
	if image_ok; then
		[ "${1:-}" = quiet ] || log "image is up to date: $IMAGE"
		return 0
	fi
	[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap)"
	ensure_host_packages "${HOST_PACKAGES[@]}"
	init_cache
	exec 8>"$VM_CACHE/.lock"
	if ! flock -n 8; then
		log "another process is building the image; waiting for it"
		flock 8
	fi
	if image_ok; then
		log "image built meanwhile by another process"
		exec 8>&-
		return 0
	fi
	local t0=$SECONDS mirror=${VM_MIRROR:-$(detect_mirror)}
	# The tree has /proc etc. mounted while debootstrap runs: build it outside
	# the checkout so nothing walking the source tree steps into it.
	local root debs=$VM_CACHE/debs attempt ok=0
	root=$(mktemp -d "${TMPDIR:-/var/tmp}/sparcml-vm-rootfs.XXXXXX")
	BUILD_ROOT=$root
	trap 'remove_tree "$BUILD_ROOT"' EXIT
	local pkgs
	pkgs=$(IFS=,; echo "${GUEST_PACKAGES[*]}")
	mkdir -p "$debs"
	log "debootstrap $VM_SUITE from $mirror (packages: $pkgs)"
	for attempt in 1 2 3 4; do
		remove_tree "$root" && mkdir -p "$root"
		if timeout 1800 debootstrap --variant=minbase --include="$pkgs" --cache-dir="$debs" \
			"$VM_SUITE" "$root" "$mirror" >"$VM_CACHE/debootstrap.log" 2>&1; then
			ok=1
			break
		fi
		log "debootstrap attempt $attempt failed:"
		tail -n 5 "$VM_CACHE/debootstrap.log" >&2 || true
		[ -f "$root/debootstrap/debootstrap.log" ] && tail -n 5 "$root/debootstrap/debootstrap.log" >&2
		sleep $((attempt * 15))
	done
	[ $ok -eq 1 ] || die "debootstrap failed 4 times; see $VM_CACHE/debootstrap.log"
	log "debootstrap done in $((SECONDS - t0)) s"

	# The kernel goes in second, so that its initrd is generated only once
	# and small: just what mounts /dev/vda (the default, MODULES=most, packs
	# every storage driver and costs seconds of every boot under TCG).
	mkdir -p "$root/etc/initramfs-tools/conf.d"
	echo "MODULES=list" >"$root/etc/initramfs-tools/conf.d/sparcml-vm"
	printf '%s\n' virtio_pci virtio_blk ext4 >>"$root/etc/initramfs-tools/modules"
	install_kernel "$root" "$debs" || die "installing $KERNEL_PACKAGE failed; see $VM_CACHE/kernel.log"
	log "kernel installed after $((SECONDS - t0)) s"

	printf '%s' "$STUB_INIT" >"$root/sbin/sparcml-vm-init"
	chmod 0755 "$root/sbin/sparcml-vm-init"
	echo sparcml-vm >"$root/etc/hostname"
	: >"$root/etc/fstab"
	printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
	# Space only: documentation, man pages, downloaded packages and lists.
	rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/var/cache/apt/*.bin \
		"$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*_Packages \
		"$root"/var/lib/apt/lists/*_InRelease

	local kver
	kver=$(find "$root/boot" -maxdepth 1 -name 'vmlinuz-*' -printf '%f\n' | sort -V | tail -n 1)
	kver=${kver#vmlinuz-}
	if [ -z "$kver" ] || [ ! -f "$root/boot/initrd.img-$kver" ]; then
		die "no kernel/initrd in the image tree"
	fi
	cp "$root/boot/vmlinuz-$kver" "$KERNEL.tmp"
	cp "$root/boot/initrd.img-$kver" "$INITRD.tmp"

	local used size
	used=$(du -sm "$root" | cut -f1)
	size=$((used + used / 4 + 256))
	rm -f "$IMAGE.tmp"
	mke2fs -q -F -t ext4 -L sparcml-vm -d "$root" "$IMAGE.tmp" "${size}M" >/dev/null ||
		die "mke2fs failed"
	# New inodes: guests still running on the old image keep it.
	mv -f "$KERNEL.tmp" "$KERNEL"
	mv -f "$INITRD.tmp" "$INITRD"
	mv -f "$IMAGE.tmp" "$IMAGE"
	echo "$kver" >"$VM_CACHE/kernel.version"
	image_stamp >"$STAMP"
	remove_tree "$root"
	exec 8>&-
	log "image ready in $((SECONDS - t0)) s: $IMAGE (${size} MiB, kernel $kver, initrd $(du -m "$INITRD" | cut -f1) MiB)"
}

# install_kernel ROOT DEBS: apt-get install the kernel inside the tree, with
# the .deb cache shared with debootstrap so that a rebuild downloads nothing.
install_kernel() {
	local root=$1 debs=$2 attempt rc=1
	cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
	mount -t proc proc "$root/proc"
	mount -t sysfs sysfs "$root/sys"
	cp "$debs"/linux-image-*.deb "$root/var/cache/apt/archives/" 2>/dev/null || true
	for attempt in 1 2 3 4; do
		if timeout 1200 chroot "$root" /usr/bin/env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
			sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $KERNEL_PACKAGE" \
			>"$VM_CACHE/kernel.log" 2>&1; then
			rc=0
			break
		fi
		log "kernel install attempt $attempt failed:"
		tail -n 5 "$VM_CACHE/kernel.log" >&2 || true
		sleep $((attempt * 15))
	done
	cp -n "$root"/var/cache/apt/archives/linux-image-*.deb "$debs/" 2>/dev/null || true
	umount "$root/sys" "$root/proc"
	: >"$root/etc/resolv.conf"
	return $rc
}

# ---- guests ----------------------------------------------------------------
pick_accel() {
	case "$VM_ACCEL" in
	tcg) echo "-accel tcg,thread=multi -cpu max" ;;
	kvm) echo "-accel kvm -cpu host" ;;
	auto)
		# Nested "KVM" without vmx/svm in cpuinfo cannot boot Debian's kernel.
		if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
			echo "-accel kvm -cpu host"
		else
			echo "-accel tcg,thread=multi -cpu max"
		fi
		;;
	*) die "SPARCML_VM_ACCEL must be auto, tcg or kvm" ;;
	esac
}

pick_rxe_crc() {
	case "$VM_RXE_CRC" in
	generic | pclmul) echo "$VM_RXE_CRC" ;;
	auto) case "$(pick_accel)" in *tcg*) echo generic ;; *) echo pclmul ;; esac ;;
	*) die "SPARCML_VM_RXE_CRC must be auto, generic or pclmul" ;;
	esac
}

port_free() { # port proto(t|u)
	! ss -Hln"$2" "sport = :$1" 2>/dev/null | grep -q .
}

pick_ports() { # prints two free loopback ports
	local p i
	for i in $(seq 1 50); do
		p=$((20000 + (RANDOM % 20000) * 2))
		if port_free "$p" t && port_free "$p" u && port_free $((p + 1)) u; then
			echo "$p $((p + 1))"
			return 0
		fi
	done
	die "no free loopback port found"
}

# Per-run options shared by run and run2.
OPT_SHARES=()
OPT_ENV=()
parse_run_opts() { # sets OPT_* and leaves the rest in RUN_ARGS
	RUN_ARGS=()
	while [ $# -gt 0 ]; do
		case "$1" in
		--mem) VM_MEM=$2; shift 2 ;;
		--smp) VM_SMP=$2; shift 2 ;;
		--timeout) VM_TIMEOUT=$2; shift 2 ;;
		--share) OPT_SHARES+=("$(cd "$2" && pwd)"); shift 2 ;;
		-e | --env) OPT_ENV+=("$2"); shift 2 ;;
		--link) VM_LINK=$2; shift 2 ;;
		-v | --verbose) VM_VERBOSE=1; shift ;;
		--) shift; RUN_ARGS=("$@"); return 0 ;;
		*) die "unknown option $1 (commands come after --)" ;;
		esac
	done
}

# write_ctl DIR INDEX IP PEER CMD... : the control share of one guest.
write_ctl() {
	local ctl=$1 index=$2 ip=$3 peer=$4
	shift 4
	[ $# -gt 0 ] || die "no command given"
	mkdir -p "$ctl"
	cp "$VM_DIR/guest-init.sh" "$ctl/init"
	chmod 0755 "$ctl/init"
	local cwd=/ s crc
	# Not inside the printf below: there a die in $(...) would only end the
	# subshell and leave VM_RXE_CRC empty; an assignment stops under set -e.
	crc=$(pick_rxe_crc)
	for s in "${SHARES[@]}"; do
		case "$PWD/" in "$s"/*) cwd=$PWD ;; esac
	done
	{
		printf 'VM_INDEX=%q\n' "$index"
		printf 'VM_HOSTNAME=%q\n' "sparcml-vm$index"
		printf 'VM_IP=%q\n' "$ip"
		printf 'VM_PEER=%q\n' "$peer"
		printf 'VM_MTU=%q\n' "$VM_MTU"
		printf 'VM_RXE_CRC=%q\n' "$crc"
		printf 'VM_CWD=%q\n' "$cwd"
		printf 'VM_SHARES=(%s)\n' "$(printf '%q ' "${SHARES[@]}")"
		printf 'VM_INTERACTIVE=%q\n' "$VM_INTERACTIVE"
	} >"$ctl/config"
	{
		printf '# environment of the guest command\n'
		printf 'export SPARCML_VM=1 SPARCML_VM_INDEX=%q SPARCML_VM_IP=%q SPARCML_VM_PEER_IP=%q\n' \
			"$index" "${ip%/*}" "$peer"
		# shellcheck disable=SC2016 # expanded in the guest
		printf 'export SPARCML_IB_DEV=${SPARCML_IB_DEV:-rxe0}\n'
		local kv
		# SPARCML_* of the caller (not the harness's own SPARCML_VM_*), then -e.
		while IFS= read -r kv; do
			case "$kv" in SPARCML_VM_* | SPARCML_VM=*) continue ;; esac
			printf 'export %q\n' "$kv"
		done < <(env | grep -E '^SPARCML_[A-Za-z0-9_]*=' || true)
		for kv in "${OPT_ENV[@]+"${OPT_ENV[@]}"}"; do
			[[ "$kv" == *=* ]] || die "--env wants NAME=VALUE, got $kv"
			printf 'export %q\n' "$kv"
		done
	} >"$ctl/env"
	{
		printf '#!/bin/bash\n'
		printf '%q ' "$@"
		printf '\n'
	} >"$ctl/cmd"
	: >"$ctl/output.log"
	: >"$ctl/console.log"
}

# qemu_cmd CTL NAME NETDEV MAC: sets QEMU_CMD, a guest without its serial
# ports: the image read-only (snapshot=on), the control share and SHARES over
# 9p, one virtio NIC with MTU VM_MTU.
qemu_cmd() {
	local ctl=$1 name=$2 netdev=$3 mac=$4 i=0 s accel
	read -r -a accel <<<"$(pick_accel)"
	QEMU_CMD=(qemu-system-x86_64 -name "sparcml-$name" "${accel[@]}"
		-m "$VM_MEM" -smp "$VM_SMP" -nodefaults -display none -monitor none -no-reboot
		-kernel "$KERNEL" -initrd "$INITRD"
		-append "root=/dev/vda rw init=/sbin/sparcml-vm-init console=ttyS0 net.ifnames=0 quiet loglevel=4 panic=-1"
		-drive "file=$IMAGE,if=virtio,format=raw,snapshot=on"
		-virtfs "local,path=$ctl,mount_tag=sparcml_ctl,security_model=none")
	for s in "${SHARES[@]}"; do
		# QEMU option values escape commas by doubling them.
		QEMU_CMD+=(-virtfs "local,path=${s//,/,,},mount_tag=sparcml_share$i,security_model=none")
		i=$((i + 1))
	done
	QEMU_CMD+=(-netdev "$netdev" -device "virtio-net-pci,netdev=n0,mac=$mac,host_mtu=$VM_MTU,romfile=")
}

# start_guest CTL NAME NETDEV MAC: starts qemu in the background, the kernel
# console to CTL/console.log and the command's output to CTL/output.log;
# sets GUEST_PID.
start_guest() {
	local ctl=$1
	qemu_cmd "$@"
	timeout --kill-after=15 "$VM_TIMEOUT" "${QEMU_CMD[@]}" \
		-serial "file:$ctl/console.log" -serial "file:$ctl/output.log" \
		</dev/null >"$ctl/qemu.log" 2>&1 &
	GUEST_PID=$!
}

# cmd_shell: an interactive shell in a guest, on the host's terminal (ttyS1
# on stdio). Debugging only: tests use run.
cmd_shell() {
	parse_run_opts "$@"
	[ ${#RUN_ARGS[@]} -gt 0 ] || RUN_ARGS=(bash -i)
	# A pipe's bytes would reach the serial port before the guest listens.
	[ -t 0 ] || die "vm.sh shell needs a terminal on stdin; scripts use vm.sh run"
	VM_INTERACTIVE=1
	prepare_run
	local ctl qrc=0
	ctl=$(mktemp -d "${TMPDIR:-/tmp}/sparcml-vm.XXXXXX")
	RUN_DIRS+=("$ctl")
	write_ctl "$ctl" 0 "$VM_NET.1/24" "" "${RUN_ARGS[@]}"
	qemu_cmd "$ctl" shell "user,id=n0,restrict=on" 52:54:00:c7:00:01
	log "booting; the shell appears in about half a minute (exit or ^D powers off)"
	timeout --foreground --kill-after=15 "$VM_TIMEOUT" "${QEMU_CMD[@]}" \
		-serial "file:$ctl/console.log" -chardev stdio,id=tty,signal=off -serial chardev:tty || qrc=$?
	return "$(guest_status "$ctl" vm0 "$qrc")"
}

# follow FILE PID PREFIX : stream a growing file until PID exits.
follow() {
	if [ -n "$3" ]; then
		tail -n +1 -s 0.3 --pid="$2" -f "$1" 2>/dev/null | sed -u "s/^/$3/"
	else
		tail -n +1 -s 0.3 --pid="$2" -f "$1" 2>/dev/null
	fi
}

# guest_status CTL NAME QEMU_RC : the command's status (or 124 timeout, 125 harness).
guest_status() {
	local ctl=$1 name=$2 qrc=$3
	if [ -s "$ctl/status" ]; then
		cat "$ctl/status"
		return 0
	fi
	if [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
		log "guest $name: timed out after ${VM_TIMEOUT} s (SPARCML_VM_TIMEOUT / --timeout)"
		echo 124
	else
		log "guest $name: no exit status from the guest (qemu exit $qrc)"
		echo 125
	fi
	log "---- $name: qemu log ----"
	tail -n 20 "$ctl/qemu.log" >&2 || true
	log "---- $name: last lines of the guest console ----"
	tail -n 40 "$ctl/console.log" >&2 || true
}

# alive PID: the process exists and is not a zombie waiting to be reaped.
alive() {
	local st
	st=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	st=${st##*) }
	[ "${st%% *}" != Z ]
}

RUN_DIRS=()
GUEST_PIDS=()
cleanup() {
	local p d
	for p in "${GUEST_PIDS[@]+"${GUEST_PIDS[@]}"}"; do
		kill "$p" 2>/dev/null || true
	done
	for d in "${RUN_DIRS[@]+"${RUN_DIRS[@]}"}"; do
		if [ "$VM_KEEP" = 1 ]; then
			log "kept $d"
		else
			rm -rf "$d"
		fi
	done
}

prepare_run() {
	image_ok || cmd_image quiet
	command -v qemu-system-x86_64 >/dev/null || ensure_host_packages qemu-system-x86
	SHARES=("$REPO_ROOT")
	local s
	for s in "${OPT_SHARES[@]+"${OPT_SHARES[@]}"}"; do
		case "$s" in
		/ | /bin* | /boot* | /dev* | /etc* | /lib* | /proc* | /run | /sbin* | /sys* | /usr | /usr/* | /var | /var/lib* | /tmp)
			die "--share $s would hide the guest's own $s" ;;
		esac
		[ "$s" = "$REPO_ROOT" ] || SHARES+=("$s")
	done
	trap cleanup EXIT
	trap 'exit 130' INT TERM
}

cmd_run() {
	parse_run_opts "$@"
	[ ${#RUN_ARGS[@]} -gt 0 ] || die "usage: vm.sh run [OPTS] -- CMD [ARGS...]"
	prepare_run
	local ctl t0=$SECONDS rc qrc=0
	ctl=$(mktemp -d "${TMPDIR:-/tmp}/sparcml-vm.XXXXXX")
	RUN_DIRS+=("$ctl")
	write_ctl "$ctl" 0 "$VM_NET.1/24" "" "${RUN_ARGS[@]}"
	start_guest "$ctl" vm0 "user,id=n0,restrict=on" 52:54:00:c7:00:01
	GUEST_PIDS+=("$GUEST_PID")
	local fpids=()
	follow "$ctl/output.log" "$GUEST_PID" "" &
	fpids+=($!)
	if [ "$VM_VERBOSE" = 1 ]; then
		follow "$ctl/console.log" "$GUEST_PID" "[console] " >&2 &
		fpids+=($!)
	fi
	wait "$GUEST_PID" || qrc=$?
	wait "${fpids[@]}" 2>/dev/null || true
	rc=$(guest_status "$ctl" vm0 "$qrc")
	log "guest exited with status $rc after $((SECONDS - t0)) s"
	return "$rc"
}

cmd_run2() {
	parse_run_opts "$@"
	local a=() b=() seen=0 x
	for x in "${RUN_ARGS[@]+"${RUN_ARGS[@]}"}"; do
		if [ $seen -eq 0 ] && [ "$x" = -- ]; then
			seen=1
			continue
		fi
		if [ $seen -eq 0 ]; then a+=("$x"); else b+=("$x"); fi
	done
	if [ ${#a[@]} -eq 0 ] || [ ${#b[@]} -eq 0 ]; then
		die "usage: vm.sh run2 [OPTS] -- CMD_A [ARGS...] -- CMD_B [ARGS...]"
	fi
	prepare_run
	local pa pb na nb
	read -r pa pb <<<"$(pick_ports)"
	case "$VM_LINK" in
	udp)
		na="socket,id=n0,udp=127.0.0.1:$pb,localaddr=127.0.0.1:$pa"
		nb="socket,id=n0,udp=127.0.0.1:$pa,localaddr=127.0.0.1:$pb"
		;;
	socket)
		na="socket,id=n0,listen=127.0.0.1:$pa"
		nb="socket,id=n0,connect=127.0.0.1:$pa"
		;;
	*) die "SPARCML_VM_LINK must be udp or socket" ;;
	esac
	local ca cb shared t0=$SECONDS
	ca=$(mktemp -d "${TMPDIR:-/tmp}/sparcml-vm.XXXXXX")
	cb=$(mktemp -d "${TMPDIR:-/tmp}/sparcml-vm.XXXXXX")
	# A scratch directory both guests see (same path), to coordinate.
	shared=$(mktemp -d "${TMPDIR:-/tmp}/sparcml-vm-shared.XXXXXX")
	RUN_DIRS+=("$ca" "$cb" "$shared")
	SHARES+=("$shared")
	OPT_ENV+=("SPARCML_VM_SHARED=$shared")
	write_ctl "$ca" 0 "$VM_NET.1/24" "$VM_NET.2" "${a[@]}"
	write_ctl "$cb" 1 "$VM_NET.2/24" "$VM_NET.1" "${b[@]}"
	local pida pidb fpids=() qa=0 qb=0 ra=125 rb=125
	start_guest "$ca" vm0 "$na" 52:54:00:c7:00:01
	pida=$GUEST_PID
	GUEST_PIDS+=("$pida")
	sleep 1 # the listening side must exist before the connecting one
	start_guest "$cb" vm1 "$nb" 52:54:00:c7:00:02
	pidb=$GUEST_PID
	GUEST_PIDS+=("$pidb")
	follow "$ca/output.log" "$pida" "[A] " &
	fpids+=($!)
	follow "$cb/output.log" "$pidb" "[B] " &
	fpids+=($!)
	if [ "$VM_VERBOSE" = 1 ]; then
		follow "$ca/console.log" "$pida" "[A console] " >&2 &
		fpids+=($!)
		follow "$cb/console.log" "$pidb" "[B console] " >&2 &
		fpids+=($!)
	fi
	# Wait for both; when one fails, stop the other after a grace period
	# instead of letting it wait for its dead peer until the timeout.
	local done_a=0 done_b=0 deadline=0
	while [ $done_a -eq 0 ] || [ $done_b -eq 0 ]; do
		if [ $done_a -eq 0 ] && ! alive "$pida"; then
			wait "$pida" || qa=$?
			done_a=1
			ra=$(guest_status "$ca" vm0 "$qa")
			if [ "$ra" -ne 0 ] && [ $done_b -eq 0 ]; then
				log "guest A failed ($ra): stopping guest B in ${VM_PEER_GRACE} s unless it ends"
				deadline=$((SECONDS + VM_PEER_GRACE))
			fi
		fi
		if [ $done_b -eq 0 ] && ! alive "$pidb"; then
			wait "$pidb" || qb=$?
			done_b=1
			rb=$(guest_status "$cb" vm1 "$qb")
			if [ "$rb" -ne 0 ] && [ $done_a -eq 0 ]; then
				log "guest B failed ($rb): stopping guest A in ${VM_PEER_GRACE} s unless it ends"
				deadline=$((SECONDS + VM_PEER_GRACE))
			fi
		fi
		if [ $deadline -gt 0 ] && [ $SECONDS -ge $deadline ]; then
			[ $done_a -eq 0 ] && kill "$pida" 2>/dev/null
			[ $done_b -eq 0 ] && kill "$pidb" 2>/dev/null
			deadline=0
		fi
		sleep 0.5
	done
	wait "${fpids[@]}" 2>/dev/null || true
	log "guests exited with status A=$ra B=$rb after $((SECONDS - t0)) s"
	[ "$ra" -ne 0 ] && return "$ra"
	return "$rb"
}

cmd_info() {
	cat <<EOF
cache:    $VM_CACHE $(image_ok && echo "(image up to date)" || echo "(no current image)")
suite:    $VM_SUITE
mirror:   ${VM_MIRROR:-$(detect_mirror)} 
accel:    $(pick_accel)
guest:    ${VM_MEM} MiB, ${VM_SMP} vCPUs, MTU ${VM_MTU}, rxe crc32 $(pick_rxe_crc), timeout ${VM_TIMEOUT} s
network:  $VM_NET.1 (and $VM_NET.2 in run2, link $VM_LINK)
share:    $REPO_ROOT
EOF
}

main() {
	local cmd=${1:-}
	[ $# -gt 0 ] && shift
	case "$cmd" in
	image) cmd_image "$@" ;;
	deps) ensure_host_packages "${HOST_PACKAGES[@]}" "$@" ;;
	run) cmd_run "$@" ;;
	run2) cmd_run2 "$@" ;;
	shell) cmd_shell "$@" ;;
	info) cmd_info ;;
	clean) rm -rf "$VM_CACHE" ;;
	*)
		sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
