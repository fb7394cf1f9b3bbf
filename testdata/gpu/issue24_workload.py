"""Workloads for testdata/gpu/issue24.sh (issue 24: GPU times by default).

  issue24_workload.py [--modes tiny,gpt8,gpt32] [--steps-tiny N] [--steps-gpt N]
                      [--profile-mid TRACE.json] [--wait]

tiny: a launch-bound loop (x.add_(1), 1000 per step); gpt8, gpt32: training
steps of a GPT-2-small-sized decoder (12 layers, d=768, 12 heads, seq 256)
at batch 8 (launch-bound) and 32 (GPU-bound), built from torch.nn, no
download. Each mode prints one JSON line: ms per step of its timed steps,
µs per launch (tiny), and the steps' window on CLOCK_MONOTONIC (cudatap's
clock).

--profile-mid: the program profiles itself midway, as a user does with
torch.profiler: gpt8 steps before, under and after a torch.profiler
(CPU and CUDA activities) whose trace goes to TRACE.json; it prints the
phases' windows and what its own profiler got (kernels, runtime calls).
--wait: print "ready PID" once warm and wait for a line on stdin (attach).
"""
import argparse
import json
import os
import sys
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--modes", default="tiny,gpt8,gpt32")
ap.add_argument("--steps-tiny", type=int, default=30)
ap.add_argument("--steps-gpt", type=int, default=20)
ap.add_argument("--profile-mid")
ap.add_argument("--wait", action="store_true")
a = ap.parse_args()
torch.manual_seed(0)
dev = "cuda"


def gpt(batch):
    d, L, T, V = 768, 12, 256, 50257
    layer = torch.nn.TransformerEncoderLayer(d, 12, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
    body = torch.nn.TransformerEncoder(layer, L).to(dev)
    emb = torch.nn.Embedding(V, d).to(dev)
    head = torch.nn.Linear(d, V, bias=False).to(dev)
    params = list(body.parameters()) + list(emb.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T, device=dev)
    x = torch.randint(0, V, (batch, T), device=dev)
    y = torch.randint(0, V, (batch, T), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        h = body(emb(x), mask=mask, is_causal=True)
        loss = torch.nn.functional.cross_entropy(head(h).view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
    return step


def tiny():
    t = torch.zeros(16, device=dev)

    def step():
        for _ in range(1000):
            t.add_(1)
    return step


def timed(step, steps):
    step()
    torch.cuda.synchronize()
    w0 = time.monotonic_ns()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    return secs, [w0, time.monotonic_ns()]


modes = {"tiny": tiny, "gpt8": lambda: gpt(8), "gpt32": lambda: gpt(32)}
if a.profile_mid:
    steps = {"gpt8": gpt(8)}
else:
    steps = {m: modes[m]() for m in a.modes.split(",")}
for s in steps.values():  # warm: allocator, cuBLAS handles, kernels loaded
    s()
torch.cuda.synchronize()
if a.wait:
    print("ready", os.getpid(), flush=True)
    sys.stdin.readline()

if a.profile_mid:
    from torch.profiler import profile, ProfilerActivity
    step = steps["gpt8"]
    out = {"mode": "profile-mid", "steps": a.steps_gpt}
    _, out["before_ns"] = timed(step, a.steps_gpt)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _, out["under_ns"] = timed(step, a.steps_gpt)
    prof.export_chrome_trace(a.profile_mid)
    _, out["after_ns"] = timed(step, a.steps_gpt)
    ev = json.load(open(a.profile_mid))["traceEvents"]
    out["profiler_kernels"] = sum(1 for e in ev if e.get("cat") == "kernel")
    out["profiler_memcpy"] = sum(1 for e in ev if e.get("cat") == "gpu_memcpy")
    out["profiler_runtime"] = sum(1 for e in ev if e.get("cat") == "cuda_runtime")
    print(json.dumps(out), flush=True)
    sys.exit(0)

for m, step in steps.items():
    n = a.steps_tiny if m == "tiny" else a.steps_gpt
    secs, window = timed(step, n)
    line = {"mode": m, "steps": n, "ms_per_step": 1000 * secs / n, "window_ns": window}
    if m == "tiny":
        line["us_per_launch"] = 1e6 * secs / (n * 1000)
    print(json.dumps(line), flush=True)
