"""The "sparcml" torch.distributed backend: every operation on 1 and 3
ranks, under sparcml run (env://), with init_method and store given, and
under torchrun; a killed rank; DDP and FSDP against gloo; the async hooks.
"""

import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from conftest import RANKS, REPO, env, launch


def all_passed(out, n):
    """Whether backend_ops.py reported every test it defines as passed on n
    ranks (a test left out of its TESTS list fails this too)."""
    with open(os.path.join(RANKS, "backend_ops.py")) as f:
        defined = set(re.findall(r"^def (test_\w+)", f.read(), re.M))
    m = re.search(r"backend_ops: passed on %d ranks: (.*)" % n, out)
    return m is not None and set(m.group(1).split()) == defined


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("n", [1, 3])
def test_every_operation(n):
    p = launch("backend_ops.py", n, timeout=300)
    assert all_passed(p.stdout, n), p.stdout[-4000:]


def by_hand(program, n, *args, timeout=240, extra=None):
    """Starts n ranks with RANK/WORLD_SIZE only (no launcher); returns
    their (returncode, output)."""
    procs = []
    for r in range(n):
        e = env(RANK=r, WORLD_SIZE=n, **(extra or {}))
        for k in [k for k in e if k.startswith("SPARCML_") and k not in ("SPARCML_TIMEOUT", "SPARCML_DEBUG")]:
            del e[k]
        procs.append(subprocess.Popen([sys.executable, os.path.join(RANKS, program), *args], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            p.kill()
    return [(p.returncode, o) for p, o in zip(procs, outs)]


@pytest.mark.parametrize("how", ["tcp", "store"])
def test_init_method_and_store(how):
    port = free_port()
    arg = "tcp://127.0.0.1:%d" % port if how == "tcp" else "store:127.0.0.1:%d" % port
    res = by_hand("backend_ops.py", 3, arg)
    for r, (rc, out) in enumerate(res):
        assert rc == 0, "rank %d exited %d:\n%s" % (r, rc, out[-8000:])


def test_torchrun():
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    assert torchrun, "torchrun is missing next to %s" % sys.executable
    e = env()
    for k in [k for k in e if k.startswith("SPARCML_") and k not in ("SPARCML_TIMEOUT", "SPARCML_DEBUG")]:
        del e[k]
    p = subprocess.run([torchrun, "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                        "127.0.0.1:%d" % free_port(), os.path.join(RANKS, "backend_ops.py")],
                       env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-8000:]
    assert all_passed(p.stdout, 2), p.stdout[-4000:]


def test_killed_rank_is_named():
    res = by_hand("backend_killed.py", 3, "tcp://127.0.0.1:%d" % free_port(), timeout=120)
    assert res[2][0] != 0
    for r in (0, 1):
        rc, out = res[r]
        assert rc == 0, "rank %d exited %d:\n%s" % (r, rc, out[-8000:])
        assert "raised naming rank 2" in out, out[-4000:]


def test_ddp_equals_gloo():
    launch("backend_ddp.py", 3, timeout=600)


def test_fsdp_equals_gloo():
    launch("backend_fsdp.py", 2, timeout=600)


@pytest.mark.parametrize("example,args", [("ddp_backend.py", ["--steps", "5", "--hook", "allreduce"]),
                                          ("recsys.py", ["--steps", "4", "--items", "5000"])])
def test_examples(example, args):
    launch(os.path.join(REPO, "examples", "pytorch", example), 2, *args, timeout=300)


def test_timeout_is_the_deadline():
    res = by_hand("backend_timeout.py", 2, "tcp://127.0.0.1:%d" % free_port(), timeout=120)
    rc, out = res[0]
    assert rc == 0 and "rank 0 timed out" in out, out[-4000:]


def launcher_env():
    """The tests' environment without torchrun's or sparcml run's
    variables (what mpirun and srun do not set)."""
    e = env()
    for k in [k for k in e if k.startswith(("SPARCML_", "OMPI_", "PMI_", "SLURM_"))
              and k not in ("SPARCML_TIMEOUT", "SPARCML_DEBUG")]:
        del e[k]
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def test_mpirun():
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun (Open MPI) is not installed: `make deps-mpi` installs it")
    e = launcher_env()
    e["SPARCML_ADDR"] = "127.0.0.1:%d" % free_port()
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "3"]
    for k in ("PYTHONPATH", "SPARCML_ADDR", "SPARCML_TIMEOUT", "SPARCML_DEBUG"):
        cmd += ["-x", k]
    p = subprocess.run(cmd + [sys.executable, os.path.join(RANKS, "backend_launcher.py")], env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-8000:]
    for r in range(3):
        assert "rank %d of 3: launcher environment ok" % r in p.stdout, p.stdout[-4000:]


def test_srun_environment():
    """No Slurm daemons run here: the ranks are started by hand with the
    variables srun gives each task of a one-node step (SLURM_PROCID,
    SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID, SLURM_STEP_ID,
    SLURM_STEP_NODELIST); sparcml derives rank, size, rank 0's host (the
    step's first node) and the token from them, as under srun."""
    port = free_port()
    procs = []
    for r in range(3):
        e = launcher_env()
        e.update(SLURM_PROCID=str(r), SLURM_NTASKS="3", SLURM_LOCALID=str(r), SLURM_NODEID="0",
                 SLURM_JOB_ID=str(port), SLURM_STEP_ID="0", SLURM_STEP_NODELIST="localhost",
                 SLURM_JOB_NODELIST="localhost", SPARCML_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, os.path.join(RANKS, "backend_launcher.py")], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            p.kill()
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, "rank %d exited %d:\n%s" % (r, p.returncode, out[-8000:])
        assert "rank %d of 3: launcher environment ok" % r in out, out[-4000:]
