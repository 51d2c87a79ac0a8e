#!/usr/bin/env bash
# Prepares .venv/ in the repository: the newest torch from PyPI, NumPy,
# pytest and ruff, for the Python and PyTorch tests (make deps-python).
#
# PyPI's Linux torch wheel is built for CUDA and pulls several GB of
# nvidia-* wheels that a CPU run loads but does not use. They are
# downloaded once into pip's cache, outside the clone ($PIP_CACHE_DIR,
# default ~/.cache/pip), so a fresh clone or a second `make test` installs
# from the cache. The environment is rebuilt only when this script
# changes, or with SPARCML_VENV_UPGRADE=1 (which takes the newest versions).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${SPARCML_VENV:-.venv}
python=${SPARCML_VENV_PYTHON:-python3}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
packages=(torch numpy pytest ruff setuptools wheel)

stamp="$venv/.sparcml-stamp"
want=$(sha256sum "$0" | cut -d' ' -f1)
if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && [ -z "${SPARCML_VENV_UPGRADE:-}" ]; then
	exit 0
fi
if ! [ -x "$venv/bin/python" ]; then
	echo "venv: creating $venv with $($python --version 2>&1)"
	$python -m venv "$venv"
fi
echo "venv: installing ${packages[*]} (cache $PIP_CACHE_DIR)"
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
