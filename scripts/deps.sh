#!/usr/bin/env bash
# Installs the Debian packages the build, tests and demo need, only when
# missing. Run as root (CI is); elsewhere it prints what to install.
#
#   deps.sh           the build (libibverbs headers and providers) and
#                     Fashion-MNIST for `sparcml train` and `make demo`
#                     (dataset-fashion-mnist: /usr/share/datasets/fashion-mnist)
#   deps.sh python    also what scripts/venv.sh needs to make the Python
#                     tests' virtual environment (python3-venv; torch, NumPy,
#                     pytest and ruff come from PyPI into .venv), and Open
#                     MPI's mpirun, which the backend's launcher test uses
#   deps.sh cluster   also the emulated cluster's tools (test/cluster)
#   deps.sh mpi       also Open MPI, for the peers of `make bench-cluster`
set -euo pipefail

pkgs=(libibverbs-dev ibverbs-providers dataset-fashion-mnist)
for group in "$@"; do
	case $group in
	python) pkgs+=(python3-venv python3-pip openmpi-bin) ;;
	cluster) pkgs+=(iproute2 iptables ethtool iperf3) ;;
	mpi) pkgs+=(openmpi-bin libopenmpi-dev) ;;
	*) echo "deps: unknown group '$group' (want python, cluster or mpi)" >&2; exit 2 ;;
	esac
done

need=()
have() { dpkg -s "$1" >/dev/null 2>&1; }
for p in "${pkgs[@]}"; do
	have "$p" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "deps: missing Debian packages: ${need[*]} (install them; without the verbs headers, build with TAGS=sparcml_noverbs; without Fashion-MNIST, sparcml train needs --data)" >&2
	exit 0
fi
echo "deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
for i in 1 2 3; do
	if apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; then
		exit 0
	fi
	echo "deps: apt-get failed (try $i), retrying" >&2
	sleep $((i * 5))
done
echo "deps: could not install ${need[*]}" >&2
exit 1
