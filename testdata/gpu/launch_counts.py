"""Launch counts from PyTorch's own profiler, to compare with cudatap's on the
same run. Modes: eager, compile (torch.compile reduce-overhead: CUDA graphs),
triton (a hand-written Triton kernel). Prints one JSON line with the profiler's
counts of runtime and driver launch calls and graph launches.
Usage: python3 launch_counts.py MODE
"""
import json
import sys

import torch
from torch.profiler import ProfilerActivity, profile

MODE = sys.argv[1] if len(sys.argv) > 1 else "eager"


def eager_model():
    m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
    x = torch.randn(64, 256, device="cuda")
    return lambda: m(x).relu_().sum()


def compiled_model():
    m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
    cm = torch.compile(m, mode="reduce-overhead")
    x = torch.randn(64, 256, device="cuda")
    for _ in range(5):  # warm up: compile, record the graph
        cm(x)
    torch.cuda.synchronize()
    return lambda: cm(x)


def triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    n = 1 << 20
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](x, y, out, n, BLOCK=1024)  # compile outside the profile
    torch.cuda.synchronize()
    return lambda: add_kernel[grid](x, y, out, n, BLOCK=1024)


def main():
    fn = {"eager": eager_model, "compile": compiled_model, "triton": triton_kernel}[MODE]()
    fn()
    torch.cuda.synchronize()
    counts = {}
    import time
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.monotonic_ns()  # CLOCK_MONOTONIC: the clock of cudatap's trace
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t1 = time.monotonic_ns()
    for ev in prof.events():
        if ev.name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaGraphLaunch", "cudaMemcpyAsync", "cudaStreamSynchronize"):
            counts[ev.name] = counts.get(ev.name, 0) + 1
    kernels = sum(1 for ev in prof.events() if ev.device_type == torch.autograd.DeviceType.CUDA)
    print(json.dumps({"mode": MODE, "profiler_api_counts": counts, "profiler_gpu_activities": kernels, "window_ns": [t0, t1]}))


if __name__ == "__main__":
    main()
