"""pip install ./python in a fresh virtual environment: the wheel's build
compiles libsparcml.so and the launcher with Go; the installed package
uses its own library, reports the repository's version (git describe, as
the Makefile's VERSION) and runs `python -m sparcml run`."""

import os
import subprocess
import sys

from conftest import REPO


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert p.returncode == 0, "%s exited %d\n%s\n%s" % (cmd, p.returncode, p.stdout[-4000:], p.stderr[-8000:])
    return p.stdout


def test_pip_install_builds_the_library(tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARCML_LIBRARY")}
    env["PATH"] = os.environ.get("PATH", "") + ":/usr/local/go/bin"
    run([py, "-m", "pip", "install", "-q", os.path.join(REPO, "python")], env=env, timeout=900)
    want = run(["git", "-C", REPO, "describe", "--always", "--dirty"]).strip()
    out = run([py, "-c", "import sparcml, sparcml._lib as l; print(sparcml.__version__); print(l.lib()._name)"],
              env=env, cwd=str(tmp_path), timeout=60).split()
    assert out[0] == want, (out, want)
    assert out[1].startswith(str(venv)), out
    env["SPARCML_DEBUG"] = "NONE"
    got = run([py, "-m", "sparcml", "run", "-n", "2", "--timeout", "60s", "--", py, "-c",
               "import numpy as np, sparcml; c = sparcml.init(); x = np.full(3, c.rank + 1.0); c.allreduce(x); "
               "assert (x == 3).all(), x; print('ok', c.rank)"], env=env, cwd=str(tmp_path), timeout=120)
    assert "ok 0" in got and "ok 1" in got, got
