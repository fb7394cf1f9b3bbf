"""A small training job for `cudatap record -- torchrun ... follow_train.py`:
the PyTorch profiler runs around everything the worker does on the GPU, so
its count of launch calls is the worker's whole count, to compare with
cudatap's for the same process. Prints one JSON line: pid, rank, the
profiler's launch calls."""
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile

LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx")

with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    m = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)]).cuda()
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    x = torch.randn(64, 512, device="cuda")
    for _ in range(30):
        loss = m(x).relu().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    torch.cuda.synchronize()
n = sum(1 for e in prof.events() if e.name in LAUNCHES)
print(json.dumps({"pid": os.getpid(), "rank": int(os.environ.get("RANK", "-1")), "profiler_launches": n}), flush=True)
