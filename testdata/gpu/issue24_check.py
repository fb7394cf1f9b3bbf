"""Reads what testdata/gpu/issue24.sh ran (issue 24: GPU times by default).

  issue24_check.py drops CUDATAP.json
      the GPU-time losses in the trace's footer: "lost", "unmatched",
      "late", "unmeasured" (0 late wanted: no op lost at a normal exit)
  issue24_check.py handover CUDATAP.json WORKLOAD.out BASELINE.out
      a process that started torch.profiler midway while cudatap held
      CUPTI: its profiler's counts against the same run without cudatap
      (BASELINE.out), cudatap's GPU slices by timing before, under and
      after the profiler, and the hand-over marks
  issue24_check.py cost DIR
      the cost table from DIR/cost-ROUND-HOW.out: median ms per step (and
      µs per launch for tiny) per workload and way, and the same-run
      ratios against plain and against cudatap without GPU times
"""
import glob
import gzip
import json
import os
import statistics
import sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def trace(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)


def lines(path):
    out = []
    for l in open(path, errors="replace"):
        l = l.strip()
        if l.startswith("{") and '"mode"' in l:
            out.append(json.loads(l))
    return out


def drops(path):
    d = trace(path)["cudatap"]["drops"]
    keys = ["gpu_times_lost", "gpu_times_unmatched", "gpu_times_late", "gpu_ops_unmeasured", "window_full"]
    print("GPU-time drops:", {k: d.get(k) for k in keys})
    print(("PASS" if d.get("gpu_times_late") == 0 and d.get("gpu_times_lost") == 0 else "FAIL") + ": no op lost at exit (late 0, lost 0)")


def handover(path, wout, bout):
    w, b = lines(wout)[-1], lines(bout)[-1]
    print(f"profiler inside cudatap: kernels {w['profiler_kernels']} memcpy {w['profiler_memcpy']} runtime {w['profiler_runtime']}")
    print(f"profiler without cudatap: kernels {b['profiler_kernels']} memcpy {b['profiler_memcpy']} runtime {b['profiler_runtime']}")
    same = all(w[k] == b[k] for k in ("profiler_kernels", "profiler_memcpy", "profiler_runtime"))
    print(("PASS" if same and w["profiler_kernels"] > 0 else "FAIL") + ": the user's profiler trace equals one taken without cudatap (kernel, copy and runtime counts)")
    t = trace(path)
    ev = t["traceEvents"]
    marks = [(e["ts"], e["name"]) for e in ev if e.get("ph") == "i" and e.get("cat") == "cudatap"]
    for ts, name in marks:
        print("mark at", ts, name)
    phases = {}
    for ph in ("before", "under", "after"):
        lo, hi = (x / 1000 for x in w[ph + "_ns"])
        c = {}
        for e in ev:
            if e.get("ph") == "X" and e.get("cat") in GPU_CATS and lo <= float(e["ts"]) <= hi:
                tm = e.get("args", {}).get("timing")
                c[tm] = c.get(tm, 0) + 1
        phases[ph] = c
        print(f"cudatap GPU slices {ph:6s} the profiler: {c}")
    before_ok = set(phases["before"]) == {"measured"}
    under_ok = "measured" not in phases["under"]
    print(("PASS" if before_ok and under_ok and marks else "FAIL") +
          ": measured before, bounded while the profiler holds CUPTI, the hand-over marked")
    taken_back = any("taken back" in n for _, n in marks)
    print(("taken back: " + ("yes" if taken_back else "no")) + ("; after: all measured" if set(phases["after"]) == {"measured"} else ""))


def cost(d):
    rows = {}
    for f in sorted(glob.glob(os.path.join(d, "cost-*.out"))):
        how = os.path.basename(f)[len("cost-"):-len(".out")].split("-", 1)[1]
        for l in lines(f):
            rows.setdefault((l["mode"], how), []).append(l)
    hows = ["plain", "cudatap", "gputimes", "kernelonly", "api"]
    print(f"{'workload':8s} " + " ".join(f"{h:>14s}" for h in hows) + "   (median of the rounds; ratio to plain; ratio to cudatap)")
    for mode in ("tiny", "gpt8", "gpt32"):
        key = "us_per_launch" if mode == "tiny" else "ms_per_step"
        med = {h: statistics.median(r[key] for r in rows[(mode, h)]) for h in hows if (mode, h) in rows}
        if not med:
            continue
        print(f"{mode:8s} " + " ".join(f"{med.get(h, float('nan')):14.3f}" for h in hows) + ("  µs/launch" if mode == "tiny" else "  ms/step"))
        if "plain" in med:
            print(f"{'':8s} " + " ".join(f"{med[h] / med['plain']:14.3f}" if h in med else " " * 14 for h in hows))
        if "cudatap" in med:
            print(f"{'':8s} " + " ".join(f"{med[h] / med['cudatap']:14.3f}" if h in med else " " * 14 for h in hows))
        if mode == "tiny" and "cudatap" in med and "gputimes" in med:
            print(f"         GPU times add {med['gputimes'] - med['cudatap']:.2f} µs per launch over cudatap alone (aim ≤ 1.5)")
        elif "plain" in med and "gputimes" in med:
            print(f"         GPU times: {100 * (med['gputimes'] / med['plain'] - 1):+.1f}% over plain (aim ≤ {5 if mode == 'gpt8' else 1}%)")


if __name__ == "__main__":
    {"drops": lambda: drops(sys.argv[2]), "handover": lambda: handover(*sys.argv[2:5]), "cost": lambda: cost(sys.argv[2])}[sys.argv[1]]()
