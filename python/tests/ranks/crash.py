"""A rank that dies of an uncaught exception aborts its communicator at
exit, so the ranks waiting for it inside a collective fail at once with
PeerLost or Aborted naming it. (A plain finalize would start its closing
barrier where they run their collective: they would report a misleading
mismatch, or wait for their deadline.)

    /usr/bin/python3 python/tests/ranks/crash.py

Three ranks started by hand, with no launcher to kill the others.
"""

import os
import socket
import subprocess
import sys

# Rank 1 raises once its first allreduce has returned. A survivor may still
# be inside that first allreduce when rank 1's abort arrives (the abort
# fails everything pending on the transport), so the failure is expected in
# either call: what matters is its kind and that it names rank 1.
RANK = """
import numpy as np, sparcml
comm = sparcml.init()
try:
    comm.allreduce(np.ones(4))
    if comm.rank == 1:
        raise RuntimeError("the model diverged")
    comm.allreduce(np.ones(4))
except sparcml.Error as e:
    print("%s %s" % (type(e).__name__, e))
"""

here = os.path.dirname(os.path.abspath(__file__))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
procs = []
for r in range(3):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARCML_")}
    env.update(SPARCML_RANK=str(r), SPARCML_SIZE="3", SPARCML_ADDR="127.0.0.1:%d" % port, SPARCML_TOKEN="crash-test",
               SPARCML_DEBUG="NONE", SPARCML_TIMEOUT="30s",
               PYTHONPATH=os.path.join(here, "..", ".."))
    procs.append(subprocess.Popen([sys.executable, "-c", RANK], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True))
outs = []
for p in procs:
    try:
        outs.append(p.communicate(timeout=120)[0])
    except subprocess.TimeoutExpired:
        for q in procs:
            q.kill()
        raise SystemExit("FAIL: a rank hung")
assert procs[1].returncode != 0 and "the model diverged" in outs[1], outs[1]
for r in (0, 2):
    line = outs[r].strip().splitlines()[-1] if outs[r].strip() else ""
    assert procs[r].returncode == 0 and line.split()[0] in ("PeerLost", "Aborted") and "rank 1" in line, \
        "rank %d: exit %d: %s" % (r, procs[r].returncode, outs[r])
print("test_crash.py: the survivors failed at once, naming the crashed rank")
