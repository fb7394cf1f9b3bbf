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
  issue24_check.py exact KINETO.json PROF.out CUDATAP.json.gz CUDATAP.out DEBUGDIR CBIDS.tsv
      the same workload under the PyTorch profiler and under cudatap (GPU
      times on, CUDATAP_GPUTIME_DEBUG=DEBUGDIR): per stream, kernels,
      copies and memsets counted, their names and busy time (cudatap's
      slices in its run's timed window, from CUDATAP.out); every drop
      counter; the join's misses by reason (DEBUGDIR/model-PID.tsv) and
      the ops CUPTI alone saw, by the CUPTI call they came under
      (DEBUGDIR/gputime-PID.tsv, named by CBIDS.tsv: "domain cbid name")
"""
import collections
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
    order = ["plain", "cudatap", "gputimes", "kernelonly", "api"]
    hows = [h for h in order if any(k[1] == h for k in rows)]
    print(f"{'workload':8s} " + " ".join(f"{h:>14s}" for h in hows) + "   (median of the rounds; ratio to plain; ratio to cudatap)")
    for mode in ("tiny", "gpt8", "gpt32"):
        key = "us_per_launch" if mode == "tiny" else "ms_per_step"
        med = {h: statistics.median(r[key] for r in rows[(mode, h)]) for h in hows if (mode, h) in rows}
        if not med:
            continue
        n = {h: len(rows[(mode, h)]) for h in med}
        print(f"{mode:8s} " + " ".join(f"{med.get(h, float('nan')):14.3f}" for h in hows) + ("  µs/launch" if mode == "tiny" else "  ms/step"))
        if "plain" in med:
            print(f"{'':8s} " + " ".join(f"{med[h] / med['plain']:14.3f}" if h in med else " " * 14 for h in hows))
        if "cudatap" in med:
            print(f"{'':8s} " + " ".join(f"{med[h] / med['cudatap']:14.3f}" if h in med else " " * 14 for h in hows))
        print(f"{'rounds':8s} " + " ".join(f"{n.get(h, 0):14d}" for h in hows))
        for h in hows:
            if (mode, h) in rows:
                print(f"   {h}: " + " ".join(f"{r[key]:.3f}" for r in rows[(mode, h)]))
        if mode == "tiny" and "cudatap" in med and "gputimes" in med:
            # Against cudatap alone in the same rounds (rounds 1-3 hold the default).
            base = statistics.median(r[key] for r in rows[(mode, "cudatap")][:n.get("gputimes", 0)] or rows[(mode, "cudatap")])
            add = med["gputimes"] - base
            print(f"{'PASS' if add <= 1.5 else 'FAIL'}: GPU times add {add:.2f} µs per launch over cudatap alone (aim ≤ 1.5)")
            for h in ("kernelonly", "api"):
                if h in med:
                    print(f"   {h}: adds {med[h] - med['cudatap']:.2f} µs per launch over cudatap alone (all its rounds)")
        elif "plain" in med and "gputimes" in med:
            print(f"         GPU times: {100 * (med['gputimes'] / med['plain'] - 1):+.1f}% over plain (aim ≤ {5 if mode == 'gpt8' else 1}%)")


GPU_NAMES = {"kernel": "kernels", "gpu_memcpy": "copies", "gpu_memset": "memsets"}


def window(path):
    for l in lines(path):
        if "window_ns" in l:
            return [w / 1000 for w in l["window_ns"]]
    return None


def union(spans):
    busy, cs, ce = 0.0, None, None
    for s, t in sorted(spans):
        if ce is None or s > ce:
            if ce is not None:
                busy += ce - cs
            cs, ce = s, t
        else:
            ce = max(ce, t)
    return busy + (ce - cs if ce is not None else 0.0)


def streams(events, win=None):
    """Per stream (device, stream): counts by category, names, spans, and
    for cudatap's the slices CUPTI alone saw and those not measured."""
    out = collections.defaultdict(lambda: {"n": collections.Counter(), "names": collections.Counter(), "spans": [], "cupti_only": 0, "unmeasured": 0})
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in GPU_NAMES:
            continue
        a = e.get("args", {})
        if "stream" not in a:
            continue
        ts, dur = float(e["ts"]), float(e.get("dur", 0))
        if win and not (win[0] <= ts <= win[1]):
            continue
        s = out[(a.get("device", 0), a["stream"])]
        s["n"][e["cat"]] += 1
        s["names"][(e["cat"], e.get("name", "?"))] += 1
        s["spans"].append((ts, ts + dur))
        s["cupti_only"] += bool(a.get("cupti_only"))
        s["unmeasured"] += a.get("timing", "measured") != "measured"
    return out


def tsv(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", errors="replace") as f:
        for l in f:
            yield l.rstrip("\n").split("\t")


def exact(kineto, prof_out, ct, ct_out, dbg, cbids):
    ok = True
    try:
        k = streams(trace(kineto)["traceEvents"])
    except (OSError, ValueError) as e:
        print("FAIL: no profiler trace:", e)
        return
    try:
        t = trace(ct)
    except (OSError, ValueError) as e:
        print("FAIL: no cudatap trace:", e)
        return
    c = streams(t["traceEvents"], window(ct_out))
    ks = sorted(k.items(), key=lambda x: -sum(x[1]["n"].values()))
    cs = sorted(c.items(), key=lambda x: -sum(x[1]["n"].values()))
    print(f"streams: profiler {len(ks)}, cudatap {len(cs)} (paired by their number of ops)")
    if len(ks) != len(cs):
        ok = False
    for (kk, kv), (ck, cv) in zip(ks, cs):
        kb, cb = union(kv["spans"]), union(cv["spans"])
        diff = abs(cb - kb) / kb * 100 if kb else 0.0
        counts = " ".join(f"{GPU_NAMES[cat]} {kv['n'][cat]}/{cv['n'][cat]}" for cat in GPU_NAMES)
        same = kv["n"] == cv["n"]
        print(f"stream profiler {kk} / cudatap {ck}: {counts} (profiler/cudatap) {'same' if same else 'DIFFER'}; "
              f"busy {kb / 1000:.3f} / {cb / 1000:.3f} ms ({diff:.2f}%); CUPTI only {cv['cupti_only']}, not measured {cv['unmeasured']}")
        only_k, only_c = kv["names"] - cv["names"], cv["names"] - kv["names"]
        for what, d in (("only the profiler's", only_k), ("only cudatap's", only_c)):
            if d:
                print(f"   {sum(d.values())} slices {what}: " + "; ".join(f"{n}× {cat}:{name[:70]}" for (cat, name), n in d.most_common(5)))
        ok = ok and same and not only_k and not only_c and diff <= 3.0 and cv["unmeasured"] == 0
    print(("PASS" if ok else "FAIL") + ": every stream's kernels, copies and memsets, their names, busy within 3%, every slice measured")
    d = t.get("cudatap", {}).get("drops", {})
    nz = {key: v for key, v in d.items() if v and key not in ("submitted", "received", "limits")}
    nz.update({"limits." + key: v for key, v in d.get("limits", {}).items() if v})
    print("drops (non-zero):", nz or "none", f"(submitted {d.get('submitted')}, received {d.get('received')})")
    misses = collections.Counter()
    only = collections.Counter()
    calls = {}
    names = {}
    if os.path.exists(cbids):
        for f in tsv(cbids):
            if len(f) == 3:
                names[(f[0], f[1])] = f[2]
    for path in glob.glob(os.path.join(dbg, "gputime-*.tsv*")):
        pid = os.path.basename(path).split("-")[1].split(".")[0]
        for f in tsv(path):
            if f[0] == "call" and len(f) >= 7:
                calls[(pid, f[1])] = (f[2], names.get((f[3], f[4]), f"{f[3]}:{f[4]}"))
    for path in glob.glob(os.path.join(dbg, "model-*.tsv*")):
        pid = os.path.basename(path).split("-")[1].split(".")[0]
        for f in tsv(path):
            if len(f) < 9:
                continue
            if f[0] == "CUPTI only":
                tid, call = calls.get((pid, f[1]), ("?", "no call record"))
                only[(f[5], call, "main" if tid == pid else "other")] += 1
            else:
                misses[f[0]] += 1
    print("the join's misses by reason (debug):", dict(misses) or "none")
    print("ops CUPTI alone saw, by kind × the CUPTI call they came under × thread (main: the process's first):")
    for (kind, call, th), n in only.most_common(10):
        print(f"   {n:6d}  {kind:10s} {call:40s} {th}")
    bad = {key: d.get(key, 0) for key in ("gpu_times_lost", "gpu_times_unmatched", "gpu_times_late", "gpu_ops_unmeasured")}
    clean = not any(bad.values()) and not misses
    print(("PASS" if clean else "FAIL") + f": nothing lost, unmatched, late or unmeasured, no second measurement ({bad}; CUPTI only {d.get('gpu_ops_cupti_only', 0)})")


if __name__ == "__main__":
    {"drops": lambda: drops(sys.argv[2]), "handover": lambda: handover(*sys.argv[2:5]), "cost": lambda: cost(sys.argv[2]),
     "exact": lambda: exact(*sys.argv[2:8])}[sys.argv[1]]()
