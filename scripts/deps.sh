#!/usr/bin/env bash
# Installs the Debian packages the build and tests need, only when missing.
# Run as root (CI is); elsewhere it prints what to install.
set -euo pipefail

need=()
have() { dpkg -s "$1" >/dev/null 2>&1; }
for p in libibverbs-dev ibverbs-providers; do
	have "$p" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
	echo "deps: missing Debian packages: ${need[*]} (install them, or build with TAGS=sparcml_noverbs)" >&2
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
