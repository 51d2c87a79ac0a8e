"""dist.init_process_group("sparcml") from a launcher's environment alone
(mpirun's OMPI_COMM_WORLD_*, srun's SLURM_*: no RANK, WORLD_SIZE,
MASTER_ADDR or MASTER_PORT), then an all_reduce, a subgroup's and an
all_gather, each checked against a reference computed here from every
rank's seeded input.

    mpirun -np 3 -x SPARCML_ADDR=127.0.0.1:29500 python backend_launcher.py
"""

import os
import zlib

import torch
import torch.distributed as dist

import sparcml.torch  # noqa: F401 - registers the backend and the env:// handler for launchers

torch.set_num_threads(1)


def data(name, rank, n):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()) * 1000 + rank)
    return torch.randint(-8, 9, (n,), generator=g).float()


def main():
    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        assert not os.environ.get(v), "%s is set: this program tests the launchers that do not set it" % v
    dist.init_process_group("sparcml")
    rank, size = dist.get_rank(), dist.get_world_size()
    t = data("launch", rank, 1000)
    dist.all_reduce(t)
    torch.testing.assert_close(t, sum(data("launch", r, 1000) for r in range(size)))
    members = list(range(0, size, 2))
    g = dist.new_group(members)
    if rank in members:
        t = data("launch-sub", rank, 10)
        dist.all_reduce(t, group=g)
        torch.testing.assert_close(t, sum(data("launch-sub", r, 10) for r in members))
    out = [torch.empty(3) for _ in range(size)]
    dist.all_gather(out, torch.full((3,), float(rank)))
    assert [o[0].item() for o in out] == [float(r) for r in range(size)], out
    dist.barrier()
    print("rank %d of %d: launcher environment ok" % (rank, size), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
