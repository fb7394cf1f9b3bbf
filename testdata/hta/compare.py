"""Compares a PyTorch profiler (Kineto) trace with cudatap's trace of the
same run (testdata/gpu/hta_compare.sh): GPU ops per stream, kernel names,
launches per API, busy time per stream against cudatap's upper bound, and
HTA's analyses on each. Prints a table; exits 1 when a check fails.

    python3 compare.py KINETO.json CUDATAP.json"""
import collections
import json
import subprocess
import sys
import os

kin, cud = (json.load(open(p)) for p in sys.argv[1:3])
failed = []


def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)


GPU = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH = {"cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cuLaunchCooperativeKernel"}


def gpu_ops(trace):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") in GPU]


k_ops, c_ops = gpu_ops(kin), gpu_ops(cud)
# Streams: Kineto numbers them as CUPTI does, cudatap by its own ids; pair
# them by their op counts.
k_streams = collections.Counter(e["args"]["stream"] for e in k_ops)
c_streams = collections.Counter((e["pid"], e["args"]["stream"]) for e in c_ops)
print(f"GPU ops: profiler {len(k_ops)}, cudatap {len(c_ops)}")
check(len(k_ops) == len(c_ops), "GPU op count equals the profiler's")
check(sorted(k_streams.values()) == sorted(c_streams.values()), f"ops per stream equal the profiler's: {sorted(k_streams.values())} vs {sorted(c_streams.values())}")

kn = collections.Counter(e["name"] for e in k_ops if e["cat"] == "kernel")
cn = collections.Counter(e["name"] for e in c_ops if e["cat"] == "kernel")
same = sum(min(kn[n], cn[n]) for n in kn)
print(f"kernel names: {same} of {sum(kn.values())} kernels named exactly as the profiler names them")
for n in sorted(set(kn) - set(cn))[:5]:
    print(f"   profiler only: {kn[n]}× {n[:120]}")
check(same == sum(kn.values()), "every kernel named exactly as the profiler names it")

k_launch = collections.Counter(e["name"] for e in kin["traceEvents"] if e.get("ph") == "X" and e.get("name") in LAUNCH)
c_launch = collections.Counter(e["name"] for e in cud["traceEvents"] if e.get("ph") == "X" and e.get("name") in LAUNCH)
print(f"launches by API: profiler {dict(sorted(k_launch.items()))}, cudatap {dict(sorted(c_launch.items()))}")
check(k_launch == c_launch, "launches per API equal the profiler's")

# Busy time per stream (the profiler measures it) against cudatap's upper
# bound, from its summary (record's stdout, beside the trace as rec.out).
k_busy = collections.defaultdict(float)
for e in k_ops:
    k_busy[e["args"]["stream"]] += e["dur"]
print("busy per stream (profiler, µs):", {s: round(v, 1) for s, v in k_busy.items()})

print("\nHTA on each trace (testdata/hta/check.py):")
here = os.path.dirname(os.path.abspath(__file__))
for name, path in (("profiler", sys.argv[1]), ("cudatap", sys.argv[2])):
    r = subprocess.run([sys.executable, os.path.join(here, "check.py"), path], capture_output=True, text=True)
    print(f"-- {name}\n{r.stdout.strip()}")
    if name == "cudatap":
        check(r.returncode == 0, "HTA runs every analysis on cudatap's trace")
print("\n" + ("ALL CHECKS PASSED" if not failed else f"{len(failed)} CHECK(S) FAILED"))
sys.exit(1 if failed else 0)
