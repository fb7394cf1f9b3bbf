"""Workloads for the host side of the summary (issue 14): run one under
`cudatap record`, then read `cudatap syncs` and the summary.

  launch  a launch-bound loop of tiny kernels: "host bound"
  sync    a user's loop calling torch.cuda.synchronize(): the site is this
          file's line, not torch/cuda/__init__.py
  nccl    a 1-rank NCCL process group (its watchdog thread polls every
          work's end event) with a busy GPU: the watchdog is a background
          poller; the main thread's syncs top the sites
  stall   a loop waiting for a slow DataLoader: "input-pipeline stall"
"""
import os
import sys
import time

import torch

SECONDS = float(os.environ.get("SECONDS_PER_MODE", "8"))


def launch():
    x = torch.zeros(1, device="cuda")
    end = time.time() + SECONDS
    n = 0
    while time.time() < end:
        for _ in range(1000):
            x.add_(1)  # one tiny kernel
        n += 1000
    torch.cuda.synchronize()
    print("launches", n)


def step(a):
    for _ in range(10):
        a = torch.relu(a @ a) * 1e-3
    torch.cuda.synchronize()  # the user's line
    return a


def sync():
    a = torch.randn(2048, 2048, device="cuda")
    end = time.time() + SECONDS
    while time.time() < end:
        a = step(a)


def nccl():
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
    a = torch.randn(8192, 8192, device="cuda")
    g = torch.randn(64 << 20, device="cuda")
    end = time.time() + SECONDS
    i = 0
    while time.time() < end:
        for _ in range(20):
            a = torch.tanh(a @ a)  # the GPU stays busy: the all-reduce's end event is late
        dist.all_reduce(g)
        i += 1
        if i % 4 == 0:
            torch.cuda.current_stream().synchronize()  # the user's sync
    torch.cuda.synchronize()
    dist.destroy_process_group()


class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        time.sleep(0.002)  # decoding on the CPU
        return torch.randn(3, 64, 64)


def stall():
    loader = torch.utils.data.DataLoader(Slow(), batch_size=32, num_workers=0)
    w = torch.randn(3 * 64 * 64, 10, device="cuda")
    end = time.time() + SECONDS
    for x in loader:
        x = x.cuda().flatten(1)
        loss = (x @ w).square().mean()
        loss.item()
        if time.time() > end:
            break


if __name__ == "__main__":
    {"launch": launch, "sync": sync, "nccl": nccl, "stall": stall}[sys.argv[1]]()
