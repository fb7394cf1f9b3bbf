"""Compares cudatap's findings with PyTorch's own tools on the same runs.
Usage: compare.py OUTDIR   (the files gpu-check.sh wrote). Prints a report
and exits 1 when a check fails."""
import gzip
import json
import os
import sys

out = sys.argv[1]
failed = []


def load_json_line(path):
    with open(path) as f:
        for line in reversed(f.read().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
    raise SystemExit(f"{path}: no JSON line")


def trace(path):
    with gzip.open(path) if path.endswith(".gz") else open(path) as f:
        return json.load(f)


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)


# 1. Hidden synchronizations: every line torch.cuda.set_sync_debug_mode("warn")
# flags, plus the pageable non_blocking copy it cannot see.
p = os.path.join(out, "sync.stdout")
if os.path.exists(p):
    script = load_json_line(p)
    sites = json.load(open(os.path.join(out, "syncs.json")))["sites"]
    by_line = {}
    for s in sites:
        # The script's line anywhere in the Python stack: print(tensor) and
        # torch.cuda.synchronize() block inside torch's own Python code.
        for frame in s.get("python_stack") or [s.get("python_line", "")]:
            if "sync_patterns.py:" in frame:
                n = int(frame.split("sync_patterns.py:")[1].split()[0])
                by_line.setdefault(n, []).append(s)
                break
    print("\n== synchronizations: torch sync-debug warnings vs cudatap (sync_patterns.py)")
    print(f"{'pattern':24} {'line':>5} {'torch warns':>11} {'cudatap':>8}  cudatap kinds")
    lines = {v: k for k, v in script["patterns"].items()}
    warned = {l for _, l in script["torch_warnings"]}
    for name, line in sorted(script["patterns"].items(), key=lambda kv: kv[1]):
        found = by_line.get(line, [])
        kinds = sorted({s["kind"] for s in found})
        print(f"{name:24} {line:5} {'yes' if line in warned else 'no':>11} {'yes' if found else 'no':>8}  {', '.join(kinds)}")
    for line in sorted(warned):
        check(line in by_line, f"torch warns at sync_patterns.py:{line} ({lines.get(line, '?')}): cudatap reports it")
    for name in ("print", "explicit_synchronize", "empty_cache"):
        line = script["patterns"][name]
        check(line in by_line, f"{name} at line {line} reported (torch: {'warns' if line in warned else 'silent'})")
    pl = script["patterns"]["pageable_non_blocking"]
    check(any(s["kind"] == "pageable_memcpy" for s in by_line.get(pl, [])),
          f"pageable non_blocking copy at line {pl} reported as pageable_memcpy (torch: {'warns' if pl in warned else 'silent'})")

# 2. Launch counts against PyTorch's profiler, in the profiled window.
LAUNCH = {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel"}
GRAPH = {"cudaGraphLaunch", "cuGraphLaunch"}
print("\n== launches in the profiled window: PyTorch profiler vs cudatap")
for mode in ("eager", "compile", "triton"):
    p = os.path.join(out, f"launch_{mode}.stdout")
    if not os.path.exists(p):
        continue
    r = load_json_line(p)
    t0, t1 = (x / 1000 for x in r["window_ns"])
    ev = trace(os.path.join(out, f"launch_{mode}.json.gz"))["traceEvents"]
    host = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and t0 <= e["ts"] <= t1]
    ours = sum(1 for e in host if e["name"] in LAUNCH)
    graphs = sum(1 for e in host if e["name"] in GRAPH)
    pc = r["profiler_api_counts"]
    theirs = sum(v for k, v in pc.items() if k in LAUNCH)
    their_graphs = sum(v for k, v in pc.items() if k in GRAPH)
    print(f"{mode:8} profiler launches {theirs:6} graphs {their_graphs:4} | cudatap launches {ours:6} graphs {graphs:4} | profiler API counts {pc}")
    check(ours == theirs and graphs == their_graphs, f"{mode}: launch and graph-launch counts equal the profiler's")
    # Per API: launches the runtime made are named as the program called
    # them (cudaLaunchKernel...), as the profiler names them.
    by_name = {}
    for e in host:
        if e["name"] in LAUNCH:
            by_name[e["name"]] = by_name.get(e["name"], 0) + 1
    theirs_by_name = {k: v for k, v in pc.items() if k in LAUNCH}
    print(f"         by API: profiler {dict(sorted(theirs_by_name.items()))} | cudatap {dict(sorted(by_name.items()))}")
    check(by_name == theirs_by_name, f"{mode}: launches per API equal the profiler's")
    named = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel" and t0 <= e["ts"] <= t1 + 1e6]
    unnamed = sum(1 for e in named if e["name"].startswith("kernel@"))
    print(f"         GPU kernel slices {len(named)}, unnamed {unnamed}, e.g. {sorted({e['name'] for e in named})[:3]}")

# 3. DDP: comm streams and all-reduce bytes.
p = os.path.join(out, "ddp.stdout")
if os.path.exists(p):
    r = load_json_line(p)
    ev = trace(os.path.join(out, "ddp.json.gz"))["traceEvents"]
    nccl = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "nccl"]
    byproc = {}
    for e in nccl:
        if e["name"] == "ncclAllReduce":
            b = byproc.setdefault(e["pid"], {"calls": 0, "bytes": 0, "streams": set()})
            b["calls"] += 1
            b["bytes"] += e["args"].get("bytes", 0)
            b["streams"].add(e["args"].get("target_stream", e["args"].get("stream")))
    print("\n== DDP (2 ranks): all-reduce bytes vs gradient bytes")
    steps, grad = r["steps"], r["grad_bytes_per_step"]
    for pid, b in sorted(byproc.items()):
        print(f"pid {pid}: {b['calls']} ncclAllReduce, {b['bytes']} bytes = {b['bytes'] / steps:.0f}/step (gradients {grad}/step), streams {sorted(b['streams'])}")
    check(len(byproc) == 2, "both ranks traced with NCCL calls")
    check(all(b["bytes"] >= steps * grad for b in byproc.values()), "all-reduce bytes cover the gradient bytes of every step")

print("\n" + ("ALL CHECKS PASSED" if not failed else f"{len(failed)} CHECK(S) FAILED"))
sys.exit(1 if failed else 0)
