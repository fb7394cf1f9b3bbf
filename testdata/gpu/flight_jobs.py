"""PyTorch jobs for the flight recorder on the H200 (issue 25 items 2 and 3;
flight.sh runs them under cudatap agent --flight-recorder).

  python3 flight_jobs.py killed OUT.json
      50 steps of a 4096 x 4096 matmul and a relu, synchronized; writes its
      pid and the steps to OUT.json, then waits to be killed (flight.sh
      sends SIGKILL, as the kernel's OOM killer or a scheduler would).

  python3 flight_jobs.py loop OUT.json SECONDS
      a GPT-2-small-like model (12 layers, d_model 768, 12 heads, vocab
      50257), batch 1, sequence 64, trained in eager mode for SECONDS:
      launch-bound (a step is hundreds of small kernels). Every step ends
      with a synchronization; OUT.json gets the pid and each step's end
      (time.time()), for flight.sh to compare the steps with and without
      the agent.
"""
import json
import os
import sys
import time

import torch
import torch.nn as nn


def killed(out):
    a = torch.randn(4096, 4096, device="cuda")
    for _ in range(50):
        a = torch.relu(a @ a) / 4096
    torch.cuda.synchronize()
    with open(out, "w") as f:
        json.dump({"pid": os.getpid(), "steps": 50}, f)
    while True:
        time.sleep(1)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class GPT2Small(nn.Module):
    def __init__(self, vocab=50257, d=768, layers=12, heads=12, ctx=1024):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), 1)
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for b in self.blocks:
            x = b(x, mask)
        return self.head(self.ln(x))


def loop(out, seconds):
    torch.manual_seed(0)
    model = GPT2Small().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    idx = torch.randint(0, 50257, (1, 65), device="cuda")
    x, y = idx[:, :-1], idx[:, 1:]
    ends = []
    start = time.time()
    while time.time() - start < seconds:
        loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        ends.append(time.time())
    with open(out, "w") as f:
        json.dump({"pid": os.getpid(), "ends": ends}, f)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "killed":
        killed(out)
    else:
        loop(out, float(sys.argv[3]))
