"""FSDP (fully_shard) on the "sparcml" backend ends with the parameters
the same training ends with on gloo, after the same seeded steps.

    sparcml run -n 2 -- python python/tests/ranks/backend_fsdp.py
"""

import copy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard

import sparcml.torch  # noqa: F401 - registers the backend

torch.set_num_threads(1)
STEPS = 4


def train(model, group):
    m = copy.deepcopy(model)
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(m, mesh=mesh)
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    rank = dist.get_rank()
    for step in range(STEPS):
        g = torch.Generator().manual_seed(10 * step + rank)
        x, y = torch.randn(8, 12, generator=g), torch.randn(8, 3, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        opt.step()
    return [p.full_tensor().detach().clone() for p in m.parameters()]


if __name__ == "__main__":
    dist.init_process_group("sparcml")
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))
    want = train(model, gloo)
    got = train(model, dist.group.WORLD)
    assert not all(torch.equal(p, q) for p, q in zip(model.parameters(), want)), "training changed nothing"
    for i, (a, b) in enumerate(zip(got, want)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m, i=i: "parameter %d: %s" % (i, m))
    dist.barrier()
    if dist.get_rank() == 0:
        print("backend_fsdp: fully_shard on sparcml equals fully_shard on gloo")
    dist.destroy_process_group()
