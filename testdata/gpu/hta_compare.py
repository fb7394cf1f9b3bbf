"""A training loop profiled by PyTorch's profiler (CUPTI), to compare with
cudatap attached to the same process over the same window. Waits for a line
on stdin (cudatap attached) after warming up, makes CUDA calls only inside
the profiled window, writes the profiler's Kineto trace, prints one JSON line.
Usage: hta_compare.py KINETO_TRACE [STEPS]"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

out = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")
side = torch.cuda.Stream()
for _ in range(5):  # warm up: cuBLAS handles, kernels loaded
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
print("ready", flush=True)
sys.stdin.readline()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(steps):
        opt.zero_grad()
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        with torch.cuda.stream(side):  # some work on a second stream
            y = (x * 2).sum()
        if i % 10 == 0:
            loss.item()
    torch.cuda.synchronize()
prof.export_chrome_trace(out)
print(json.dumps({"steps": steps}), flush=True)
