"""Summarizes testdata/gpu/issue24_diag.sh's run (issue 24: why GPU ops go
unmeasured with the callback join).

  issue24_diag.py join TRACE.json.gz DEBUGDIR CBIDS.tsv
      TRACE: cudatap's Chrome trace; DEBUGDIR: CUDATAP_GPUTIME_DEBUG's files
      (gputime-PID.tsv: the collector's call and GPU records; model-PID.tsv:
      the measurements the model could not join); CBIDS: "domain cbid name".
      Prints: unmeasured ops by kernel × thread (main, other) × traced API,
      and for each group what the collector recorded around their enqueue
      on their thread (a call record spanning it, or the nearest one); the
      model's misses by reason × kernel × thread × CUPTI call; call records
      per thread × domain × call.
  issue24_diag.py clock KINETO.json[.gz] TRACE.json.gz [TRACE.json.gz ...]
      kernel durations (count, sum, median) in the profiler's trace and in
      cudatap's (measured slices), to tell a clock that stretches times.
"""
import bisect
import collections
import glob
import gzip
import json
import os
import statistics
import sys

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        t = json.load(f)
    return t["traceEvents"] if isinstance(t, dict) else t


def ns(us):
    return round(float(us) * 1000)


def short(name, n=70):
    return (name or "?")[:n]


def tsv(path):
    for l in open(path, errors="replace"):
        yield l.rstrip("\n").split("\t")


def join(trace, dbg, cbids_path):
    ev = load(trace)
    cbname = {}
    if os.path.exists(cbids_path):
        for f in tsv(cbids_path):
            if len(f) == 3:
                cbname[(f[0], f[1])] = f[2]
    calls_by_corr = {}  # cudatap's correlation (one count for the session) -> (pid, tid, symbol, enqueue ns)
    gpu = []
    for e in ev:
        if e.get("ph") != "X":
            continue
        a = e.get("args", {})
        if e.get("cat") in GPU_CATS:
            gpu.append(e)
        elif "correlation" in a:
            calls_by_corr[a["correlation"]] = (e["pid"], e["tid"], a.get("symbol", e["name"]), ns(e["ts"]))
    # the collector's records, per process
    calls = collections.defaultdict(list)  # (pid, tid) -> [(start, end, corr, domain, cbid)]
    gpu_by_corr = {}
    pids = set()
    for path in glob.glob(os.path.join(dbg, "gputime-*.tsv")):
        pid = int(os.path.basename(path)[len("gputime-"):-4])
        pids.add(pid)
        for f in tsv(path):
            if f[0] == "call":
                corr, tid, dom, cbid, s, en = f[1:7]
                calls[(pid, int(tid))].append((int(s), int(en), int(corr), dom, cbid))
            elif f[0] == "gpu":
                gpu_by_corr[(pid, int(f[2]))] = (f[1], f[8] if len(f) > 8 else "", f[4])
    for v in calls.values():
        v.sort()
    def cb(dom, cbid):
        return cbname.get((dom, cbid), f"{dom}:{cbid}")
    def thread(pid, tid):
        return "main" if pid == tid else "other"

    print("## call records per thread (main: the process's first thread) × domain × call")
    c = collections.Counter()
    for (pid, tid), v in calls.items():
        for s, en, corr, dom, cbid in v:
            c[(pid, thread(pid, tid), tid, cb(dom, cbid))] += 1
    for k, n in sorted(c.items(), key=lambda x: -x[1])[:40]:
        print(f"{n:8d}  pid {k[0]} {k[1]:5s} tid {k[2]:7d}  {k[3]}")
    durs = [en - s for v in calls.values() for s, en, *_ in v]
    if durs:
        print(f"call records: {len(durs)}, span median {statistics.median(durs)} ns, instants {sum(1 for d in durs if d == 0)}")

    print("\n## unmeasured GPU ops: kernel × thread × traced API (count), and what the collector recorded around their enqueue")
    groups = collections.defaultdict(list)
    for e in gpu:
        a = e["args"]
        if a.get("timing") == "measured":
            continue
        call = calls_by_corr.get(a.get("correlation"))  # a GPU track's pid is not the process's
        if call is None:
            groups[(short(e["name"]), "?", "no traced call")].append(None)
            continue
        pid, tid, sym, enq = call
        groups[(short(e["name"]), thread(pid, tid), sym)].append((pid, tid, enq))
    for (name, th, sym), items in sorted(groups.items(), key=lambda x: -len(x[1]))[:30]:
        how = collections.Counter()
        for it in items:
            if it is None:
                how["-"] += 1
                continue
            pid, tid, enq = it
            v = calls.get((pid, tid), [])
            i = bisect.bisect_right(v, (enq, 1 << 62))
            # A call record that spans the traced call's entry: CUPTI's call
            # is outside it (a static runtime's); one starting just after
            # it: inside (the traced call is the runtime's, CUPTI's is too).
            spans = [r for r in v[max(0, i - 4):i] if r[0] <= enq <= r[1]]
            if spans:
                r = spans[-1]
                g = gpu_by_corr.get((pid, r[2]))
                how[f"spanned by {cb(r[3], r[4])} (its GPU record: {short(g[1], 40) if g else 'none'})"] += 1
                continue
            before = v[i - 1] if i > 0 else None
            after = v[i] if i < len(v) else None
            d_b = f"{cb(before[3], before[4])} ended {(enq - before[1]) / 1000:.1f} µs before" if before else "none before"
            d_a = f"{cb(after[3], after[4])} starts {(after[0] - enq) / 1000:.1f} µs after" if after else "none after"
            how[f"no call record spans it; nearest: {d_b}, {d_a}"[:150]] += 1
        print(f"{len(items):6d}  {name:70s} {th:5s} {sym}")
        for k, n in how.most_common(4):
            print(f"          {n:6d}  {k}")

    print("\n## the model's misses: reason × kernel × thread × CUPTI call (model-PID.tsv)")
    m = collections.Counter()
    shifted = collections.Counter()
    for path in glob.glob(os.path.join(dbg, "model-*.tsv")):
        pid = int(os.path.basename(path)[len("model-"):-4])
        for f in tsv(path):
            why, corr, tid = f[0], int(f[1]), int(f[2])
            rec = next((r for r in calls.get((pid, tid), []) if r[2] == corr), None)
            call = cb(rec[3], rec[4]) if rec else "no call record"
            m[(why, short(f[8], 60), thread(pid, tid), call)] += 1
            if len(f) > 9:
                op = calls_by_corr.get(int(f[9]))
                shifted[(why, short(f[8], 40), op[2] if op else "?")] += 1
    for k, n in m.most_common(30):
        print(f"{n:6d}  {k[0]:18s} {k[1]:60s} {k[2]:5s} {k[3]}")
    if shifted:
        print("  the op they found (late, second measurement): reason × its record's kernel × the op's traced API")
        for k, n in shifted.most_common(12):
            print(f"    {n:6d}  {k}")
    noapi = collections.Counter()
    for path in glob.glob(os.path.join(dbg, "gputime-*.tsv")):
        for f in tsv(path):
            if f[0] == "noapi":
                noapi[f[1]] += 1
    print("\nGPU records with no call record (noapi), by kind:", dict(noapi) or "none")


def clock(kineto, *traces):
    def stats(durs):
        return f"{len(durs):7d} kernels, sum {sum(durs) / 1e3:10.3f} µs, median {statistics.median(durs) if durs else 0:8.1f} ns"
    k = [ns(e["dur"]) for e in load(kineto) if e.get("ph") == "X" and e.get("cat") == "kernel"]
    print(f"profiler          {stats(k)}")
    for t in traces:
        d = [ns(e["dur"]) for e in load(t) if e.get("ph") == "X" and e.get("cat") == "kernel" and e.get("args", {}).get("timing") == "measured"]
        print(f"{os.path.basename(t):17s} {stats(d)}")


if __name__ == "__main__":
    {"join": lambda: join(*sys.argv[2:5]), "clock": lambda: clock(*sys.argv[2:])}[sys.argv[1]]()
