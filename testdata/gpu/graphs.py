"""A 5-kernel model captured with torch.cuda.graphs and replayed 50 times,
for cudatap's expanded graph replays (issue 24 item 4; graphs.sh runs it and
compares). Each of the five ops the graph captures is on a line marked with
a comment "# node: NAME", in node order; each launches one kernel, and all
five kernels are distinct.

  python3 graphs.py profile OUT.json TRACE.json   replays under torch.profiler
                                                   (CPU and CUDA activity) and
                                                   writes its Chrome trace
  python3 graphs.py plain OUT.json                 replays, nothing else (for
                                                   cudatap record)

OUT.json gets the pid, the marked lines, the replay count and the host time
the replays took.
"""
import json
import os
import re
import sys
import time

import torch

REPLAYS = 50
N = 1 << 22  # 16 MiB of float32: each kernel runs some µs on an H200

x = torch.randn(N, device="cuda")
t = [torch.empty(N, device="cuda") for _ in range(5)]


def step():
    torch.mul(x, 2.0, out=t[0])  # node: mul
    torch.add(t[0], 1.0, out=t[1])  # node: add
    torch.clamp_min(t[1], 0.0, out=t[2])  # node: clamp_min
    torch.sin(t[2], out=t[3])  # node: sin
    torch.exp(t[3], out=t[4])  # node: exp


def marked_lines():
    lines = []
    for n, text in enumerate(open(__file__), 1):
        m = re.search(r"# node: (\S+)$", text)
        if m:
            lines.append([m.group(1), n])
    return lines


def main():
    mode, out = sys.argv[1], sys.argv[2]
    # Warm-up on a side stream, as torch.cuda.graphs asks, then the capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    torch.cuda.synchronize()

    def replays():
        start = time.perf_counter()
        for _ in range(REPLAYS):
            g.replay()
        torch.cuda.synchronize()
        return time.perf_counter() - start

    if mode == "profile":
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            took = replays()
        prof.export_chrome_trace(sys.argv[3])
    else:
        took = replays()
    json.dump({"pid": os.getpid(), "mode": mode, "lines": marked_lines(), "replays": REPLAYS,
               "replays_s": took}, open(out, "w"))


if __name__ == "__main__":
    main()
