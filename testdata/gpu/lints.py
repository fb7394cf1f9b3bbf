"""Workloads that provoke each of cudatap's lints (export/lint) on a real
GPU, one per mode, and a clean one that should provoke none. Run one under
`cudatap record`, then `cudatap lint` (lints.sh does both and checks the
sites). Each line a lint should name is marked with a comment naming the lint.

  legacy    x.to("cuda", non_blocking=True) from a pageable tensor on the
            default (legacy) stream: legacy-nonblocking-copy
  race      a tensor uploaded on a side stream and read back on the default
            stream without wait_stream: cross-stream-race
  streams   big matmuls on 10 side streams at once: many-busy-streams
  pageable  .cuda() of the same pageable tensor every iteration:
            pageable-copy-loop
  sync      torch.cuda.synchronize() after every op: sync-every-launch
  clean     a copy stream and the default stream ordered with wait_stream
            and record_stream, pinned memory, one sync per step: nothing
"""
import sys

import torch

N = 1 << 22  # 16 MiB of float32


def legacy():
    x = torch.randn(N)  # pageable
    for _ in range(5):  # fewer than pageable-copy-loop's 10
        y = x.to("cuda", non_blocking=True)  # lint: legacy-nonblocking-copy
        y.mul_(2)
    torch.cuda.synchronize()


def race():
    side = torch.cuda.Stream()
    x = torch.randn(N).pin_memory()
    for _ in range(5):
        with torch.cuda.stream(side):
            y = x.to("cuda", non_blocking=True)  # lint: cross-stream-race write
        # Missing: torch.cuda.current_stream().wait_stream(side). .cpu() reads
        # y with a copy (cudaMemcpyAsync) on the default stream: the lint
        # sees copies and memsets, not kernels.
        z = y.cpu()  # lint: cross-stream-race use
        z.add_(1)
    torch.cuda.synchronize()


def streams():
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    side = [torch.cuda.Stream() for _ in range(10)]
    out = [None] * len(side)
    for _ in range(5):
        for i, s in enumerate(side):
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                out[i] = a @ b  # lint: many-busy-streams
        torch.cuda.synchronize()


def pageable():
    x = torch.randn(N)  # pageable
    acc = torch.zeros(N, device="cuda")
    for _ in range(20):
        y = x.cuda()  # lint: pageable-copy-loop
        acc += y
        acc *= 0.5
    torch.cuda.synchronize()


def sync():
    a = torch.randn(N, device="cuda")
    for _ in range(30):
        a = a * 1.0001
        torch.cuda.synchronize()  # lint: sync-every-launch
    print(float(a[0]))


def clean():
    copy = torch.cuda.Stream()
    x = torch.randn(N).pin_memory()
    w = torch.randn(N, device="cuda")
    total = 0.0
    for _ in range(20):
        with torch.cuda.stream(copy):
            y = x.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(copy)
        y.record_stream(torch.cuda.current_stream())
        for _ in range(4):
            y = torch.tanh(y * w)
        total += y.sum().item()  # one sync per step
    print(total)


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "legacy"
    torch.zeros(1, device="cuda")  # CUDA initialized before the mode runs
    {"legacy": legacy, "race": race, "streams": streams, "pageable": pageable, "sync": sync, "clean": clean}[mode]()
