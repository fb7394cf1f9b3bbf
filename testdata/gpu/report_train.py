"""A PyTorch training loop with two deliberate faults, for `cudatap report`:
an input-pipeline stall (the batch is "loaded" on the main thread, 30 ms of
host work per step with the GPU idle) and a pageable host-to-device copy
(the batch is an ordinary CPU tensor copied with non_blocking=True).
Usage: python3 report_train.py [STEPS]"""
import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(6)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)


def load_batch():
    """The slow input pipeline: decoding on the main thread."""
    time.sleep(0.03)
    return torch.randn(256, 2048)  # pageable host memory


for step in range(steps):
    x = load_batch()
    xb = x.to("cuda", non_blocking=True)  # pageable: this copy blocks the host
    loss = model(xb).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.4f}", flush=True)
torch.cuda.synchronize()
