"""A PyTorch job that runs out of device memory, for cudatap's out-of-memory
verdict (issue 25 item 1; oom.sh records it and checks the verdict). It holds
40 GiB, 30 GiB and 30 x 1 GiB at three lines, then asks for 200 GiB, more
than an H200 has; PyTorch raises torch.OutOfMemoryError. Each line cudatap
should name is marked with a comment "# oom: NAME".

  python3 oom.py recover OUT.json   catches the error, frees the 40 GiB (and
                                     empties the cache, so that the next
                                     allocation asks CUDA), allocates 1 GiB
                                     again, exits 0
  python3 oom.py die OUT.json       lets the error kill it (exit 1)

OUT.json gets, before the 200 GiB is asked, the pid and the marked lines;
recover rewrites it with PyTorch's own account of the failure (its message:
the device's free memory, the process's) and the memory it reserved then.
"""
import json
import os
import re
import sys
import time

import torch

GiB = 1 << 30


def hold_a():
    return torch.empty(40 * GiB, dtype=torch.uint8, device="cuda")  # oom: hold-a


def hold_b():
    return torch.empty(30 * GiB, dtype=torch.uint8, device="cuda")  # oom: hold-b


def hold_c():
    return [torch.empty(GiB, dtype=torch.uint8, device="cuda") for _ in range(30)]  # oom: hold-c


def ask():
    return torch.empty(200 * GiB, dtype=torch.uint8, device="cuda")  # oom: ask


def again():
    return torch.empty(GiB, dtype=torch.uint8, device="cuda")  # oom: again


def marked_lines():
    lines = {}
    for n, text in enumerate(open(__file__), 1):
        m = re.search(r"# oom: (\S+)$", text)
        if m:
            lines[m.group(1)] = n
    return lines


def main():
    mode, out = sys.argv[1], sys.argv[2]
    info = {"pid": os.getpid(), "mode": mode, "lines": marked_lines()}
    a, b, c = hold_a(), hold_b(), hold_c()
    torch.cuda.synchronize()
    info["reserved_before"] = torch.cuda.memory_reserved()
    with open(out, "w") as f:
        json.dump(info, f)
    time.sleep(0.5)  # NVML (polled every 100 ms) sees what is held
    if mode == "die":
        ask()
        return
    try:
        ask()
        raise SystemExit("200 GiB fit: this is not the GPU oom.py was written for")
    except torch.OutOfMemoryError as e:
        msg = str(e)
        info["message"] = msg.splitlines()[0]
        num = lambda pat: float(re.search(pat, msg).group(1)) if re.search(pat, msg) else None
        info["torch_free_gib"] = num(r"of which ([\d.]+) GiB is free")
        info["torch_process_gib"] = num(r"this process has ([\d.]+) GiB memory in use")
        info["reserved_at_failure"] = torch.cuda.memory_reserved()
    del a
    torch.cuda.empty_cache()
    d = again()
    torch.cuda.synchronize()
    info["recovered"] = True
    with open(out, "w") as f:
        json.dump(info, f)
    del b, c, d


if __name__ == "__main__":
    main()
