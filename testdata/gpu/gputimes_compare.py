"""Compares GPU busy time per stream: a Kineto trace (PyTorch's profiler)
against a cudatap trace (record --gpu-times) of the same workload.

  gputimes_compare.py KINETO.json CUDATAP.json [WORKLOAD_OUTPUT]

With the workload's output (its JSON line has the timed steps' window on
CLOCK_MONOTONIC, cudatap's clock), cudatap's slices are those of the timed
steps, the window the profiler recorded.

Streams are matched by their GPU op counts (the runs are identical); busy
time is the union of a stream's kernel, copy and memset slices.
"""
import json, sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}

def load(path):
    import gzip
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d

window = None
if len(sys.argv) > 3:
    for l in open(sys.argv[3]):
        if l.startswith('{"mode"'):
            window = [w / 1000 for w in json.loads(l)["window_ns"]]

def per_stream(events, cudatap):
    spans = {}
    measured = total = 0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_CATS:
            continue
        args = e.get("args", {})
        if "stream" not in args:
            continue
        if cudatap:
            if window and not (window[0] <= float(e["ts"]) <= window[1]):
                continue
            total += 1
            measured += args.get("timing") == "measured"
            key = (e["pid"], args["stream"])
        else:
            key = (args.get("device", 0), args["stream"])
        spans.setdefault(key, []).append((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))
    out = {}
    for k, v in spans.items():
        v.sort()
        busy, cs, ce = 0.0, None, None
        for s, t in v:
            if ce is None or s > ce:
                if ce is not None:
                    busy += ce - cs
                cs, ce = s, t
            else:
                ce = max(ce, t)
        if ce is not None:
            busy += ce - cs
        out[k] = (len(v), busy)
    return out, measured, total

k, _, _ = per_stream(load(sys.argv[1]), False)
ct = load(sys.argv[2])
c, measured, total = per_stream(ct, True)
from collections import Counter
um = Counter((e["cat"], e["name"][:60]) for e in ct if e.get("ph") == "X" and e.get("args", {}).get("timing") not in (None, "measured")
             and (not window or window[0] <= float(e["ts"]) <= window[1]))
if um:
    print("not measured:", um.most_common(6))
print(f"cudatap GPU slices measured by CUPTI: {measured} of {total}")
ks = sorted(k.values(), key=lambda x: -x[0])
cs = sorted(c.values(), key=lambda x: -x[0])
worst = 0.0
for (kn, kb), (cn, cb) in zip(ks, cs):
    err = abs(cb - kb) / kb * 100 if kb else 0.0
    worst = max(worst, err)
    print(f"stream: ops profiler {kn:6d} cudatap {cn:6d} | busy profiler {kb/1000:9.3f} ms cudatap {cb/1000:9.3f} ms | diff {err:5.2f}%")
print(("PASS" if worst <= 2.0 and measured == total else "FAIL") + f" busy per stream within 2% of the profiler's (worst {worst:.2f}%), every slice measured")
