#!/usr/bin/env bash
# Prepares the Python environment for the Python and PyTorch tests (make
# deps-python): the newest torch from PyPI, NumPy, pytest and ruff.
#
# PyPI's Linux torch wheel is built for CUDA and pulls several GB of
# nvidia-* wheels that a CPU run loads but does not use. So the environment
# itself lives outside the clone, in $SPARCML_VENV_HOME (default
# ~/.cache/sparcml), one per Python version, and .venv in the repository is
# a symlink to it: a fresh clone or a second `make test` reuses it without
# downloading anything. pip's own cache ($PIP_CACHE_DIR) is kept outside
# the clone too, for a rebuild. The environment is rebuilt only when the
# package list below changes, or with SPARCML_VENV_UPGRADE=1 (which takes
# the newest versions). A lock keeps two clones from installing at once.
set -euo pipefail
cd "$(dirname "$0")/.."

link=${SPARCML_VENV:-.venv}
python=${SPARCML_VENV_PYTHON:-python3}
home=${SPARCML_VENV_HOME:-$HOME/.cache/sparcml}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
packages=(torch numpy pytest ruff setuptools wheel)

pyver=$($python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
venv="$home/venv-py$pyver"
mkdir -p "$home"
if [ -d "$link" ] && ! [ -L "$link" ]; then
	echo "venv: $link is a directory from an older layout; replacing it with a link to $venv"
	rm -rf "$link"
fi
ln -sfn "$venv" "$link"

exec 9>"$home/venv-py$pyver.lock"
flock 9
stamp="$venv/.sparcml-stamp"
want=$(echo "${packages[*]}" | sha256sum | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -z "${SPARCML_VENV_UPGRADE:-}" ]; then
	exit 0
fi
if ! [ -x "$venv/bin/python" ]; then
	echo "venv: creating $venv with $($python --version 2>&1)"
	$python -m venv "$venv"
fi
echo "venv: installing ${packages[*]} into $venv (pip cache $PIP_CACHE_DIR)"
for i in 1 2 3; do
	if "$venv/bin/pip" install --quiet --upgrade "${packages[@]}"; then
		echo "$want" > "$stamp"
		"$venv/bin/python" -c 'import torch, numpy; print("venv: torch", torch.__version__, "numpy", numpy.__version__)'
		exit 0
	fi
	echo "venv: pip failed (try $i), retrying" >&2
	sleep $((i * 5))
done
echo "venv: could not install ${packages[*]}" >&2
exit 1
