"""A launch-bound PyTorch loop for measuring the per-launch cost of probes.
Loads CUDA and its kernels, prints "ready", then for every line on stdin
runs x.add_(1) N times (default 20,000) and prints the host time per
launch in ns. Usage: probecost.py [N]"""
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
x = torch.zeros(16, device="cuda")
for _ in range(1000):  # kernels loaded, caches warm
    x.add_(1)
torch.cuda.synchronize()
print("ready", flush=True)
for _ in sys.stdin:
    t0 = time.perf_counter_ns()
    for _ in range(n):
        x.add_(1)
    dt = time.perf_counter_ns() - t0
    torch.cuda.synchronize()
    print(f"{dt / n:.1f}", flush=True)
