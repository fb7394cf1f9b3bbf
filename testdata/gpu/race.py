"""Side-stream races as PyTorch users write them, for cudatap's
cross-stream-race lint with kernel arguments (issue 26 item 1; race.sh
records it with --kernel-args and checks the lint). Work on a side stream s
read on the default stream, a device synchronize after each case:

  matmul  y = x @ x on s (a cuBLAS kernel), z = y + 1 on the default stream
  copy    d.copy_(pinned, non_blocking=True) on s (a copy), u = d * 3
  cpu     q = x + 2 on s, q.cpu() on the default stream (a copy back)
  mul     w = x * 2 on s (an elementwise kernel), v = w + 1; then
          w2 = x * 2 on s, v2 = w2 * 5 (mulmul), and d.copy_ on s,
          u2 = d + 3 (copyadd): the other kernel reading

  python3 race.py race OUT.json    matmul, copy and cpu with no wait between:
                                   three races
  python3 race.py mul OUT.json     mul, mulmul and copyadd (kernels PyTorch
                                   writes, where matmul's is cuBLAS's)
  python3 race.py fixed OUT.json   all four, with
                                   torch.cuda.current_stream().wait_stream(s)
                                   before each read: no race

Each line cudatap should name is marked with a comment "# race: NAME".
OUT.json gets the pid and the marked lines.
"""
import json
import os
import re
import sys

import torch

STEPS = 10


def step(mode, s, x, pinned, d):
    fixed = mode == "fixed"
    main = torch.cuda.current_stream()
    s.wait_stream(main)  # x and d are ready before s uses them
    check = 0.0

    if mode != "mul":
        with torch.cuda.stream(s):
            y = x @ x  # race: matmul-write
        if fixed:
            main.wait_stream(s)
        z = y + 1  # race: matmul-read
        torch.cuda.synchronize()

        with torch.cuda.stream(s):
            d.copy_(pinned, non_blocking=True)  # race: copy-write
        if fixed:
            main.wait_stream(s)
        u = d * 3  # race: copy-read
        torch.cuda.synchronize()

        with torch.cuda.stream(s):
            q = x + 2  # race: cpu-write
        if fixed:
            main.wait_stream(s)
        r = q.cpu()  # race: cpu-read
        torch.cuda.synchronize()
        check += float(z[0, 0] + u[0, 0] + r[0, 0])

    if mode != "race":
        with torch.cuda.stream(s):
            w = x * 2  # race: mul-write
        if fixed:
            main.wait_stream(s)
        v = w + 1  # race: mul-read
        torch.cuda.synchronize()

        # The same races with the other elementwise kernel reading: a mul
        # (AUnaryFunctor<MulFunctor>) after a mul, an add
        # (CUDAFunctorOnSelf_add) after a copy. Whichever of these and mul
        # is found tells a kernel's parameter layout from its stream.
        with torch.cuda.stream(s):
            w2 = x * 2  # race: mulmul-write
        if fixed:
            main.wait_stream(s)
        v2 = w2 * 5  # race: mulmul-read
        torch.cuda.synchronize()

        with torch.cuda.stream(s):
            d.copy_(pinned, non_blocking=True)  # race: copyadd-write
        if fixed:
            main.wait_stream(s)
        u2 = d + 3  # race: copyadd-read
        torch.cuda.synchronize()
        check += float(v[0, 0] + v2[0, 0] + u2[0, 0])
    return check


def marked_lines():
    lines = {}
    for n, text in enumerate(open(__file__), 1):
        m = re.search(r"# race: (\S+)$", text)
        if m:
            lines[m.group(1)] = n
    return lines


def main():
    mode, out = sys.argv[1], sys.argv[2]
    if mode not in ("race", "mul", "fixed"):
        sys.exit(f"race.py: mode {mode!r}: give race, mul or fixed")
    json.dump({"pid": os.getpid(), "mode": mode, "lines": marked_lines()}, open(out, "w"))
    torch.manual_seed(0)
    x = torch.randn(1024, 1024, device="cuda")
    d = torch.empty(1024, 1024, device="cuda")
    pinned = torch.ones(1024, 1024).pin_memory()
    s = torch.cuda.Stream()
    torch.cuda.synchronize()
    total = 0.0
    for _ in range(STEPS):
        total += step(mode, s, x, pinned, d)
    print(f"race.py {mode}: {STEPS} steps, checksum {total:.3f}")


if __name__ == "__main__":
    main()
