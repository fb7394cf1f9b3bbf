"""Pinned buffers allocated before cudatap attaches: copies from them must
be classified pinned, not pageable. Prints "ready", then for SECONDS copies
a pinned and a pageable 1 MiB buffer to the GPU (non_blocking) in a loop.
Usage: pinned_attach.py SECONDS"""
import sys
import time

import torch

secs = float(sys.argv[1]) if len(sys.argv) > 1 else 10
pinned = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
pageable = torch.empty(1 << 20, dtype=torch.uint8)
dev = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
dev.copy_(pinned, non_blocking=True)
torch.cuda.synchronize()
print("ready", flush=True)
end = time.time() + secs
n = 0
while time.time() < end:
    dev.copy_(pinned, non_blocking=True)   # pinned: no host sync
    if n % 10 == 0:
        dev.copy_(pageable, non_blocking=True)  # pageable: a hidden sync
    torch.cuda.synchronize()
    n += 1
print(f"iterations {n}", flush=True)
