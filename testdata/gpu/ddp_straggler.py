"""Two-process DDP loop with one slow rank (torchrun --nproc_per_node=2).
SLOW_RANK sleeps SLOW_MS before each backward (a slow data loader, say);
HANG_RANK stops arriving after HANG_AFTER steps (sleeps HANG_S, outside
CUDA, as a rank stuck in its input pipeline would). Rank 0 prints one JSON
line: steps, the slow rank, its sleep, the step time."""
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
rank = dist.get_rank()
# DDP_DEVICE puts every rank on one GPU (a one-GPU machine; NCCL may refuse).
torch.cuda.set_device(int(os.environ.get("DDP_DEVICE", rank)))
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(8)]).cuda()
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
x = torch.randn(128, 2048, device="cuda")
steps = int(os.environ.get("STEPS", "40"))
slow_rank = int(os.environ.get("SLOW_RANK", "-1"))
slow_s = float(os.environ.get("SLOW_MS", "20")) / 1000
hang_rank = int(os.environ.get("HANG_RANK", "-1"))
hang_after = int(os.environ.get("HANG_AFTER", "10"))


def load_batch():
    """Where the slow rank loses its time."""
    if rank == slow_rank:
        time.sleep(slow_s)


t0 = time.time()
for step in range(steps):
    if rank == hang_rank and step == hang_after:
        time.sleep(float(os.environ.get("HANG_S", "60")))
    opt.zero_grad()
    out = ddp(x).square().mean()
    load_batch()
    out.backward()
    opt.step()
torch.cuda.synchronize()
if rank == 0:
    print(json.dumps({"steps": steps, "slow_rank": slow_rank, "slow_ms": slow_s * 1000,
                      "step_ms": (time.time() - t0) / steps * 1000, "pid": os.getpid()}), flush=True)
dist.destroy_process_group()
