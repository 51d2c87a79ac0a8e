#!/usr/bin/env bash
# exports.sh HEADER: the linker version script that exports exactly the
# functions the header declares and hides everything else (the Go
# runtime's symbols, the internal Go exports of capi/).
set -euo pipefail
echo "{"
echo "  global:"
grep -E '^[a-z]' "$1" | grep -oE '\bsparcml_[a-z_]+\(' | tr -d '(' | sort -u | sed 's/.*/    &;/'
echo "  local: *;"
echo "};"
