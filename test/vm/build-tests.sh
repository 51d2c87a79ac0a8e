#!/usr/bin/env bash
# build-tests.sh OUTDIR PKG...: compile the test binaries of the given
# packages (patterns as for `go list`, e.g. ./rdma/...) on the host, for a
# guest run by guest-tests.sh.
#
# Each binary goes to OUTDIR/<package dir relative to the module>/<name>.test
# (e.g. build/vm-tests/rdma/rdma.test), so guest-tests.sh can run it in its
# package's source directory, as `go test` would. Packages without tests and
# patterns that match nothing are skipped. OUTDIR is emptied first so a
# removed package leaves no stale binary behind.
#
# Environment: GO (default go), GOFLAGS_TAGS (e.g. "-tags foo"),
# VM_GO_TEST_BUILD_FLAGS (extra `go test -c` flags, e.g. -race).
set -euo pipefail

[ $# -ge 2 ] || { echo "usage: build-tests.sh OUTDIR PKG..." >&2; exit 2; }
out=$1
shift
GO=${GO:-go}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"

# cgo packages (verbs) need the libibverbs headers on the host.
if ! [ -f /usr/include/infiniband/verbs.h ]; then
	"$here/vm.sh" deps libibverbs-dev
fi

rm -rf "$out"
mkdir -p "$out"
# Patterns that match no package are dropped (go list -e reports them).
mapfile -t lines < <($GO list -e -f '{{if or .TestGoFiles .XTestGoFiles}}{{.Dir}}{{end}}' "$@" 2>/dev/null | sed '/^$/d')
if [ ${#lines[@]} -eq 0 ]; then
	echo "build-tests.sh: no test packages in: $*" >&2
	exit 1
fi
t0=$SECONDS
for dir in "${lines[@]}"; do
	rel=${dir#"$root"/}
	[ "$rel" = "$dir" ] && rel=.
	name=$(basename "$dir")
	[ "$rel" = . ] && name=$(basename "$root")
	mkdir -p "$out/$rel"
	echo "build-tests.sh: go test -c ./$rel -> $out/$rel/$name.test"
	# shellcheck disable=SC2086
	$GO test -c ${GOFLAGS_TAGS:-} ${VM_GO_TEST_BUILD_FLAGS:-} -o "$out/$rel/$name.test" "./$rel"
done
echo "build-tests.sh: ${#lines[@]} test binaries in $((SECONDS - t0)) s"
