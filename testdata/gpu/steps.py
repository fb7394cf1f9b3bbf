"""A PyTorch training loop for cudatap's step detection (issue 27 item 5;
steps.sh records it and checks what cudatap found). A small MLP trained on
random batches for STEPS iterations, after a warm-up of the same step not
counted; each iteration reads its loss back (loss.item(), the sync that
repeats once per iteration), every 10th logs an accuracy too (another
sync, at another line).

  python3 steps.py plain STEPS OUT.json   no annotation: cudatap must find
                                          the steps from the read-back alone
  python3 steps.py nvtx STEPS OUT.json    each iteration is the NVTX range
                                          "train step N" (torch.cuda.nvtx),
                                          with "forward", "backward" and
                                          "optimizer" nested in it, a mark
                                          "checkpoint" after the loop
  python3 steps.py nosync STEPS OUT.json  no read-back in the loop: no
                                          sync repeats, no steps to find
                                          (cudatap must say so)

--wait-file PATH (after the others): once warmed up, wait for PATH to exist
before the counted loop (a tracer attaching meanwhile sees it all).

OUT.json gets the pid, the thread, the mode, and the wall time of each
counted iteration as the program measured it (perf_counter around each),
to compare with cudatap's step times.
"""
import json
import os
import sys
import threading
import time

import torch
import torch.cuda.nvtx as nvtx

mode, steps, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
wait_file = sys.argv[sys.argv.index("--wait-file") + 1] if "--wait-file" in sys.argv else None
torch.manual_seed(0)
dev = "cuda"
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loss_fn = torch.nn.CrossEntropyLoss()
x_host = torch.randn(512, 1024).pin_memory()
y_host = torch.randint(0, 10, (512,)).pin_memory()


def step(i, annotate, read_back):
    if annotate:
        nvtx.range_push(f"train step {i}")
        nvtx.range_push("forward")
    x = x_host.to(dev, non_blocking=True)
    y = y_host.to(dev, non_blocking=True)
    logits = model(x)
    loss = loss_fn(logits, y)
    if annotate:
        nvtx.range_pop()
        nvtx.range_push("backward")
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if annotate:
        nvtx.range_pop()
        nvtx.range_push("optimizer")
    opt.step()
    if annotate:
        nvtx.range_pop()
    value = loss.item() if read_back else None  # the read-back: one sync per iteration
    if read_back and i % 10 == 0:
        acc = (logits.argmax(1) == y).float().mean().item()  # a log line: another sync
        print(f"step {i}: loss {value:.4f} acc {acc:.3f}", flush=True)
    if annotate:
        nvtx.range_pop()


for i in range(5):  # warm-up: cuBLAS handles, the caching allocator
    step(0, False, True)
torch.cuda.synchronize()
if wait_file:
    print(f"ready {os.getpid()}", flush=True)
    while not os.path.exists(wait_file):
        time.sleep(0.01)
times = []
for i in range(1, steps + 1):
    t0 = time.perf_counter()
    step(i, mode == "nvtx", mode != "nosync")
    times.append(time.perf_counter() - t0)
torch.cuda.synchronize()
if mode == "nvtx":
    nvtx.mark("checkpoint")
json.dump({"pid": os.getpid(), "tid": threading.get_native_id(), "mode": mode, "steps": steps, "step_s": times,
           "torch": torch.__version__}, open(out, "w"))
