"""Shared by the pytest files: how rank programs are launched.

A multi-rank test starts its rank program under `sparcml run -n N` with a
deadline (the launcher's --timeout, and subprocess's timeout above it),
every rank's operations bounded by SPARCML_TIMEOUT. The rank programs
(python/tests/ranks/) check their results against references computed
from every rank's seeded input and exit non-zero on any failure.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RANKS = os.path.join(HERE, "ranks")
SPARCML_BIN = os.environ.get("SPARCML_BIN", os.path.join(REPO, "bin", "sparcml"))


def env(**extra):
    e = dict(os.environ)
    e.setdefault("SPARCML_TIMEOUT", "60s")
    e.setdefault("SPARCML_DEBUG", "NONE")
    e["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.join(REPO, "python"), RANKS, e.get("PYTHONPATH")) if p)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def launch(program, n, *args, timeout=300, extra_env=None, check=True):
    """Runs program (a path under python/tests/ranks, or any path) on n
    ranks under sparcml run; returns the CompletedProcess. check: fail the
    test unless every rank exited 0."""
    if not os.path.exists(SPARCML_BIN):
        pytest.fail("%s is missing: run `make build` (or set SPARCML_BIN)" % SPARCML_BIN)
    path = program if os.path.isabs(program) else os.path.join(RANKS, program)
    cmd = [SPARCML_BIN, "run", "-n", str(n), "--timeout", "%ds" % timeout, "--", sys.executable, path, *args]
    p = subprocess.run(cmd, env=env(**(extra_env or {})), capture_output=True, text=True, timeout=timeout + 30)
    if check and p.returncode != 0:
        pytest.fail("%s on %d ranks exited %d\n--- stdout\n%s\n--- stderr\n%s" % (
            program, n, p.returncode, p.stdout[-6000:], p.stderr[-12000:]))
    return p


def run_script(program, *args, timeout=300):
    """Runs a program that starts its own ranks (one process), bounded."""
    path = os.path.join(RANKS, program)
    p = subprocess.run([sys.executable, path, *args], env=env(), capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        pytest.fail("%s exited %d\n--- stdout\n%s\n--- stderr\n%s" % (program, p.returncode, p.stdout[-6000:],
                                                                   p.stderr[-12000:]))
    return p
