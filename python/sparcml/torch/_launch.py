"""init_process_group's env:// under launchers that do not set torchrun's
variables (mpirun, srun).

torch's env:// rendezvous wants RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT; mpirun and srun set their own (OMPI_COMM_WORLD_RANK,
SLURM_PROCID, ...), which sparcml's own start-up reads. So when one of
torch's is missing and a launcher's are there, the env:// handler installed
here joins the job with sparcml (default_comm(): rank, size and rank 0's
address from the launcher), and rank 0 serves the c10d TCPStore on a free
port and tells the others its address and port through sparcml. With
torch's variables all set, torch's own handler runs unchanged.

Rank 0's store address: the host of SPARCML_ADDR (mpirun: `-x
SPARCML_ADDR=host:port`), else MASTER_ADDR, else the address rank 0's
host name resolves to.
"""

import datetime
import importlib
import ipaddress
import os
import socket

import numpy as np
import torch.distributed as dist

# The module (torch.distributed.rendezvous is also the name of a function).
_rdzv = importlib.import_module("torch.distributed.rendezvous")

TORCH_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
LAUNCHER_VARS = ("SPARCML_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def _store_host():
    addr = os.environ.get("SPARCML_ADDR")
    if addr:
        return addr.rsplit(":", 1)[0].strip("[]")
    return os.environ.get("MASTER_ADDR") or socket.gethostname()


def _address_words(host):
    """host's IP address as 16 numbers (IPv4 mapped into IPv6), which a
    float64 broadcast carries exactly."""
    ip = ipaddress.ip_address(socket.getaddrinfo(host, None)[0][4][0])
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + str(ip))
    return np.frombuffer(ip.packed, dtype=np.uint8).astype(np.float64)


def _host_of(words):
    ip = ipaddress.IPv6Address(bytes(words.astype(np.uint8)))
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


def _launcher_rendezvous(timeout):
    from . import default_comm
    comm = default_comm()
    msg = np.zeros(17)
    store = None
    if comm.rank == 0:
        host = _store_host()
        store = dist.TCPStore(host, 0, comm.size, is_master=True, timeout=timeout, wait_for_workers=False)
        msg[:16], msg[16] = _address_words(host), store.port
    comm.broadcast(msg, root=0)
    if store is None:
        store = dist.TCPStore(_host_of(msg[:16]), int(msg[16]), comm.size, is_master=False, timeout=timeout)
    return store, comm.rank, comm.size


def _wrap(torch_env_handler):
    def env_handler(url, timeout=datetime.timedelta(minutes=30), **kwargs):
        env = os.environ
        if all(env.get(v) for v in TORCH_VARS) or not any(env.get(v) for v in LAUNCHER_VARS):
            yield from torch_env_handler(url, timeout=timeout, **kwargs)
            return
        yield _launcher_rendezvous(timeout)
        raise RuntimeError("Unable to perform re-rendezvous using env:// method")
    env_handler.sparcml_launchers = True
    return env_handler


def install():
    """Puts the handler in front of torch's env:// (idempotent)."""
    current = _rdzv._rendezvous_handlers.get("env")
    if current is not None and not getattr(current, "sparcml_launchers", False):
        _rdzv._rendezvous_handlers["env"] = _wrap(current)
