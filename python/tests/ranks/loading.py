"""How the package finds libsparcml: $SPARCML_LIBRARY first (a wrong one is
an error naming it, not a fall-back), then the source tree, an installed
copy next to the installed package, the system path. Each case runs in a
fresh interpreter (the library loads once per process), one rank, bounded.

    /usr/bin/python3 python/tests/ranks/loading.py SPARCML_BIN STAGE

STAGE is a `make install PREFIX=STAGE` tree.
"""

import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
sparcml_bin, stage = sys.argv[1], os.path.abspath(sys.argv[2])

PROBE = """
import numpy as np, sparcml, sparcml._lib as l
comm = sparcml.init()
x = np.ones(3)
comm.allreduce(x)
assert (x == 1).all()
print(l.lib()._name)
comm.finalize()
"""


def run(env_extra, code, want_ok):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARCML_") and k != "PYTHONPATH"}
    env.update(env_extra, SPARCML_DEBUG="NONE", SPARCML_TIMEOUT="30s")
    p = subprocess.run([sparcml_bin, "run", "-n", "1", "--timeout", "60s", "--no-prefix", "--",
                        sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if (p.returncode == 0) != want_ok:
        raise SystemExit("FAIL %s: exit %d\n%s%s" % (env_extra, p.returncode, p.stdout, p.stderr))
    return p.stdout + p.stderr


out = run({"PYTHONPATH": os.path.join(repo, "python")}, PROBE, True)
assert os.path.realpath(out.split()[-1]) == os.path.realpath(os.path.join(repo, "build/lib/libsparcml.so")), out

out = run({"PYTHONPATH": os.path.join(stage, "lib/python3/dist-packages")}, PROBE, True)
assert os.path.realpath(out.split()[-1]) == os.path.realpath(os.path.join(stage, "lib/libsparcml.so.0")), out

out = run({"PYTHONPATH": os.path.join(repo, "python"),
           "SPARCML_LIBRARY": os.path.join(stage, "lib/libsparcml.so.0")}, PROBE, True)
assert out.split()[-1] == os.path.join(stage, "lib/libsparcml.so.0"), out

out = run({"PYTHONPATH": os.path.join(repo, "python"), "SPARCML_LIBRARY": "/nonexistent/libsparcml.so"}, PROBE, False)
assert "SPARCML_LIBRARY=/nonexistent/libsparcml.so" in out, out

# Importing does not load the library: only the first call does.
run({"PYTHONPATH": os.path.join(repo, "python"), "SPARCML_LIBRARY": "/nonexistent/libsparcml.so"},
    "import sparcml, sparcml.torch", True)
print("test_loading.py: SPARCML_LIBRARY, the source tree and the installed tree: ok")
