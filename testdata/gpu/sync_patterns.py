"""Every PyTorch pattern that makes the host wait for the GPU, each on its own
line, run with PyTorch's own sync debug mode so its warnings can be compared
with what cudatap finds. Prints one JSON line:
  {"patterns": {name: line}, "torch_warnings": [[file, line], ...], "launches": N}
Usage: python3 sync_patterns.py [--iters N]
"""
import inspect
import json
import sys
import warnings

import torch

ITERS = int(sys.argv[sys.argv.index("--iters") + 1]) if "--iters" in sys.argv else 3
PATTERNS = {}


def here(name):
    # The line after the call to here() is the pattern's line.
    PATTERNS[name] = inspect.currentframe().f_back.f_lineno + 1


def work(x):
    for _ in range(20):
        x = torch.relu(x @ x) * 0.5
    return x


def step(x, host):
    y = work(x)
    here("item")
    v = y.sum().item()
    here("cpu")
    c = y[:4, :4].cpu()
    here("tolist")
    t = y[0, :8].tolist()
    here("print")
    print(y[0, :2], file=sys.stderr)
    here("bool_mask")
    m = y[y > 0.1]
    here("nonzero")
    nz = torch.nonzero(y > 0.2)
    here("pageable_non_blocking")
    d = host.to("cuda", non_blocking=True)
    here("explicit_synchronize")
    torch.cuda.synchronize()
    return v, c, t, m, nz, d


def main():
    torch.cuda.init()
    x = torch.randn(512, 512, device="cuda")
    host = torch.randn(1 << 20)  # pageable: not pin_memory()
    step(x, host)  # warm up allocator, kernels and lazy loading
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(ITERS):
            step(x, host)
    torch.cuda.set_sync_debug_mode(0)
    here("empty_cache")
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    me = __file__
    seen = sorted({(w.filename, w.lineno) for w in caught if "synchroniz" in str(w.message) and w.filename.endswith(me.split("/")[-1])})
    print(json.dumps({"patterns": PATTERNS, "torch_warnings": seen, "iters": ITERS}))


if __name__ == "__main__":
    main()
