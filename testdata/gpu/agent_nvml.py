"""A GPU job for agent_nvml.sh: matmuls on a side stream and on the default
stream for SECONDS, holding a known amount of device memory. Prints its pid,
the streams' handles, its launches per stream (what it queued), and the
memory PyTorch holds, as one JSON line at the end.
Usage: python3 agent_nvml.py SECONDS
"""
import json
import os
import sys
import time

import torch

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 10
hold = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")  # 4 GiB held
a = torch.randn(4096, 4096, device="cuda")
side = torch.cuda.Stream()
launches = {"default": 0, "side": 0}
print(json.dumps({"pid": os.getpid(), "side_stream": hex(side.cuda_stream)}), flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        b = a @ a
        launches["default"] += 1
    with torch.cuda.stream(side):
        for _ in range(20):
            c = a @ a
            launches["side"] += 1
    torch.cuda.synchronize()
print(json.dumps({"pid": os.getpid(), "launches": launches, "side_stream": hex(side.cuda_stream),
                  "memory_reserved": torch.cuda.memory_reserved(), "memory_allocated": torch.cuda.memory_allocated()}), flush=True)
