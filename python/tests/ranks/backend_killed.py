"""Rank 2 dies (SIGKILL) after the first all_reduce; ranks 0 and 1 must
raise from their next one, naming rank 2, within the deadline.

    RANK=r WORLD_SIZE=3 python backend_killed.py tcp://host:port   (3 processes)
"""

import os
import signal
import sys

import torch
import torch.distributed as dist

import sparcml.torch  # noqa: F401 - registers the backend

rank = int(os.environ["RANK"])
dist.init_process_group("sparcml", init_method=sys.argv[1], rank=rank, world_size=int(os.environ["WORLD_SIZE"]))
t = torch.ones(1000)
dist.all_reduce(t)
assert (t == 3).all()
if rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    for _ in range(3):
        dist.all_reduce(torch.ones(1 << 16))
except Exception as e:  # noqa: BLE001 - whatever torch wraps it in
    msg = str(e)
    print("rank %d: %s" % (rank, msg))
    assert "rank 2" in msg, msg
    print("rank %d raised naming rank 2" % rank, flush=True)
    os._exit(0)  # the job is broken: no collective finalize
print("rank %d: all_reduce after rank 2 died did not raise" % rank)
os._exit(1)
