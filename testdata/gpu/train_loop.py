"""A small eager training loop for overhead and NVML checks. Prints one JSON
line with the mean step time. Usage: train_loop.py STEPS [--wait SECONDS]"""
import json
import sys
import time

import torch

steps = int(sys.argv[1])
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(6)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")
for _ in range(20):  # warm up
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
torch.cuda.synchronize()
print("ready", flush=True)
t0 = time.perf_counter()
for i in range(steps):
    opt.zero_grad()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    if i % 10 == 0:
        loss.item()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(json.dumps({"steps": steps, "step_us": dt / steps * 1e6}), flush=True)
