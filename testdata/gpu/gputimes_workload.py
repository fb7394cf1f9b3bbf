"""GPU-time workloads for testdata/gpu/gputimes.sh.

  gputimes_workload.py gpt  --steps N [--profile TRACE.json] [--wait]
  gputimes_workload.py tiny --steps N [--profile TRACE.json] [--wait]

gpt: training steps of a GPT-2-small-sized decoder (12 layers, d=768, 12
heads, seq 256, batch 8; built from torch.nn, no download). tiny: a
launch-bound loop of tiny kernels. --profile records the whole run with
PyTorch's profiler (CUPTI) into a Kineto trace. --wait: print "ready PID"
and wait for a line on stdin before the timed steps (for attaching).
Prints one JSON line: steps, seconds of the timed steps, per-step ms.
"""
import argparse, json, os, sys, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("mode", choices=["gpt", "tiny"])
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--profile")
ap.add_argument("--wait", action="store_true")
ap.add_argument("--wait-inside", action="store_true", help="with --profile: wait once the profiler runs")
a = ap.parse_args()
torch.manual_seed(0)
dev = "cuda"

if a.mode == "gpt":
    d, L, T, B, V = 768, 12, 256, 8, 50257
    layer = torch.nn.TransformerEncoderLayer(d, 12, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
    body = torch.nn.TransformerEncoder(layer, L).to(dev)
    emb = torch.nn.Embedding(V, d).to(dev)
    head = torch.nn.Linear(d, V, bias=False).to(dev)
    params = list(body.parameters()) + list(emb.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(T, device=dev)
    x = torch.randint(0, V, (B, T), device=dev)
    y = torch.randint(0, V, (B, T), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        h = body(emb(x), mask=mask, is_causal=True)
        loss = torch.nn.functional.cross_entropy(head(h).view(-1, V), y.view(-1))
        loss.backward()
        opt.step()
        return loss
else:
    t = torch.zeros(16, device=dev)

    def step():
        for _ in range(1000):
            t.add_(1)
        return t

step(); torch.cuda.synchronize()  # warm-up: allocator, cuBLAS handles
if a.wait:
    print("ready", os.getpid(), flush=True)
    sys.stdin.readline()

window = [0, 0]

def timed():
    window[0] = time.monotonic_ns()  # CLOCK_MONOTONIC: cudatap's clock
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    torch.cuda.synchronize()
    window[1] = time.monotonic_ns()
    return time.perf_counter() - t0

if a.profile:
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        if a.wait_inside:
            step(); torch.cuda.synchronize()
            print("ready", os.getpid(), flush=True)
            sys.stdin.readline()
        secs = timed()
    prof.export_chrome_trace(a.profile)
    ev = json.load(open(a.profile))["traceEvents"]
    print("profiler kernels:", sum(1 for e in ev if e.get("cat") == "kernel"), flush=True)
else:
    secs = timed()
print(json.dumps({"mode": a.mode, "steps": a.steps, "seconds": secs, "ms_per_step": 1000 * secs / a.steps, "window_ns": window}), flush=True)
