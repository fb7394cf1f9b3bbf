"""A launch-bound loop (x.add_(1) N times) that reports its own time per
launch, for the agent's --launch-times check: prints "PID N NS_PER_ITER".
Usage: python3 launch_times.py [N]
"""
import os
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
x = torch.zeros(1, device="cuda")
for _ in range(100):  # warm up
    x.add_(1)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(n):
    x.add_(1)
torch.cuda.synchronize()
dt = time.perf_counter() - t
print(os.getpid(), n, round(dt / n * 1e9))
