#!/usr/bin/env bash
# check-abi.sh HEADER LIBRARY: the functions the library exports are
# exactly those the header declares (declarations start at column 0 with
# their return type; comments and typedefs do not).
set -euo pipefail
header=$1 lib=$2
declared=$(grep -E '^[a-z]' "$header" | grep -oE '\bsparcml_[a-z_]+\(' | tr -d '(' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" { print $3 }' | sort -u)
if [ "$declared" != "$exported" ]; then
	echo "check-abi: $lib and $header disagree (< declared only, > exported only):" >&2
	diff <(echo "$declared") <(echo "$exported") >&2 || true
	exit 1
fi
echo "check-abi: $(echo "$declared" | wc -l) functions, the header's and the library's, agree"
