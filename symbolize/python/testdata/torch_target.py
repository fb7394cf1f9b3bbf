# Test target for symbolize/python on a GPU machine: a PyTorch sync at a
# known line. Each line on stdin runs step() once and answers "done".
import os
import sys

import torch

x = torch.ones(1 << 20, device="cuda")


def sync_item():
    return (x * 2).sum().item()  # @item


def step():
    return sync_item()  # @step


step()
print("ready", os.getpid(), "%d.%d.%d" % sys.version_info[:3], flush=True)
while True:
    line = sys.stdin.readline()
    if not line:
        break
    step()  # @loop
    print("done", flush=True)
