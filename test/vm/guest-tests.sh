#!/bin/bash
# guest-tests.sh DIR: run every host-built test binary under DIR (as laid out
# by build-tests.sh) inside a soft-RoCE guest, each in its package's source
# directory, and print a summary. Exit status 0 only if all passed.
#
#   test/vm/vm.sh run -- test/vm/guest-tests.sh build/vm-tests
#
# To add a test suite: add its package to VM_TEST_PKGS in test/vm/vm.mk; to
# give a binary its own flags or environment, add a case to per_binary below.
# Extra flags for every binary: VM_TEST_FLAGS (e.g. "-test.v -test.run Foo",
# passed through from the host with `vm.sh run -e VM_TEST_FLAGS=...`).
set -uo pipefail

dir=${1:?usage: guest-tests.sh DIR}
dir=$(cd "$dir" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

# Environment of every test binary: the RDMA transport on the guest's rxe0.
export SPARCML_TEST_TRANSPORT=${SPARCML_TEST_TRANSPORT:-rdma}
export SPARCML_IB_DEV=${SPARCML_IB_DEV:-rxe0}
export SPARCML_TEST_RDMA=1
export GOTRACEBACK=${GOTRACEBACK:-all}

# Default flags of every binary; the per-binary timeout keeps one hang from
# eating the whole guest timeout and prints all goroutines when it fires.
common_flags=(-test.count=1 -test.timeout="${VM_TEST_TIMEOUT:-10m}")

# per_binary REL: extra flags for the binary at DIR/REL (e.g. rdma/rdma.test).
per_binary() {
	case "$1" in
	# The multi-process suite: real ranks over rdma through the launcher.
	test/test.test) echo "-test.v -test.timeout=25m -test.run ^(TestCollectivesThroughLauncher|TestBenchCheckJSON|TestKillRankDuringAllreduce|TestBadInputEveryRank)$" ;;
	*) ;;
	esac
}

# per_binary_env REL: environment of the binary at DIR/REL.
per_binary_env() {
	case "$1" in
	test/test.test)
		echo "SPARCML_TRANSPORT=rdma SPARCML_TEST_PS=2,3,4 SPARCML_BIN=$root/bin/sparcml SPARCML_TESTPROG=$dir/testprog"
		;;
	esac
}

echo "== guest $(hostname): $(uname -r), $(nproc) vCPUs, $(free -m | awk '/^Mem:/{print $2}') MiB"
ibv_devinfo -d "$SPARCML_IB_DEV" | grep -E 'hca_id|transport|state|active_mtu|link_layer' || {
	echo "guest-tests.sh: no RDMA device $SPARCML_IB_DEV" >&2
	exit 1
}

mapfile -t bins < <(cd "$dir" && find . -name '*.test' -type f -perm -u+x | sed 's|^\./||' | sort)
if [ ${#bins[@]} -eq 0 ]; then
	echo "guest-tests.sh: no test binaries under $dir" >&2
	exit 1
fi

fail=0
summary=()
for rel in "${bins[@]}"; do
	pkgdir=$root/$(dirname "$rel")
	[ -d "$pkgdir" ] || pkgdir=$root
	read -r -a extra <<<"$(per_binary "$rel") ${VM_TEST_FLAGS:-}"
	flags=("${common_flags[@]}" "${extra[@]}")
	echo
	echo "== $rel ${flags[*]}"
	t0=$(date +%s.%N)
	read -r -a envs <<<"$(per_binary_env "$rel")"
	(cd "$pkgdir" && env "${envs[@]}" "$dir/$rel" "${flags[@]}")
	rc=$?
	dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
	if [ $rc -eq 0 ]; then
		summary+=("ok    $rel (${dt}s)")
	else
		summary+=("FAIL  $rel (exit $rc, ${dt}s)")
		fail=1
	fi
done

echo
echo "== summary (guest $(hostname))"
printf '%s\n' "${summary[@]}"
exit $fail
