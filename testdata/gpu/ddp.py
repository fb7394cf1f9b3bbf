"""Two-process DDP training step loop (torchrun --nproc_per_node=2 ddp.py).
Rank 0 prints one JSON line with the gradient bytes per step."""
import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
x = torch.randn(128, 2048, device="cuda")
steps = int(os.environ.get("STEPS", "30"))
for _ in range(steps):
    opt.zero_grad()
    ddp(x).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
if rank == 0:
    print(json.dumps({"steps": steps, "grad_bytes_per_step": grad_bytes, "pid": os.getpid()}), flush=True)
dist.destroy_process_group()
