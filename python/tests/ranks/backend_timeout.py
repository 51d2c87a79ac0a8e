"""The group's timeout is each operation's deadline: rank 1 enters the
all_reduce 20 s late; rank 0, with a 3 s timeout, must raise a timeout
well before rank 1 arrives.

    RANK=r WORLD_SIZE=2 python backend_timeout.py tcp://host:port   (2 processes)
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

import sparcml.torch  # noqa: F401 - registers the backend

rank = int(os.environ["RANK"])
dist.init_process_group("sparcml", init_method=sys.argv[1], rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=3))
dist.all_reduce(torch.ones(4))
if rank == 1:
    time.sleep(20)
start = time.monotonic()
try:
    dist.all_reduce(torch.ones(4))
except Exception as e:  # noqa: BLE001 - whatever torch wraps it in
    took = time.monotonic() - start
    print("rank %d raised after %.1fs: %s" % (rank, took, e), flush=True)
    if rank == 0:
        assert took < 15, took
        assert "timeout" in str(e).lower() or "deadline" in str(e).lower(), e
        print("rank 0 timed out", flush=True)
    os._exit(0)
print("rank %d: the late all_reduce did not raise" % rank, flush=True)
os._exit(1 if rank == 0 else 0)
