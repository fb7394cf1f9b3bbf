#!/usr/bin/env bash
# On the H200: graph replays expanded (issue 24 item 4). graphs.py captures
# a 5-kernel model with torch.cuda.graphs and replays it 50 times: under
# the PyTorch profiler (no cudatap), under `cudatap record` (GPU times on,
# the default) and under `cudatap record --gpu-times=off`. Checks that
# cudatap's trace has the profiler's 250 kernels (the replays' ops: slices
# with graph_node), the same names in the same order per replay, each
# replay's ops under one correlation id, the capture site of each node (the
# graphs.py line that captured it), the summary's graph counts, per-node
# durations against the profiler's (GPU times on: measured), and bounded
# ops in the launches' bounds (off). Under two minutes.
# Usage: graphs.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
echo "=================== PyTorch profiler"
timeout 100 python3 "$here/graphs.py" profile "$OUT/profile.job.json" "$OUT/profile.trace.json" >"$OUT/profile.out" 2>&1
echo "exit $?"; tail -3 "$OUT/profile.out"
for times in on off; do
	echo "=================== cudatap record --gpu-times=$times"
	timeout 100 "$BIN" record --gpu-times="$times" -o "$OUT/gpu-$times.cudatap" -- python3 "$here/graphs.py" plain "$OUT/gpu-$times.job.json" >"$OUT/gpu-$times.summary" 2>"$OUT/gpu-$times.stderr"
	echo "record exit $?"; grep -m3 -i "warn\|error\|GPU times" "$OUT/gpu-$times.stderr" | cut -c1-300
	grep "CUDA graphs:" "$OUT/gpu-$times.summary"
	"$BIN" export -q "$OUT/gpu-$times.cudatap" -o "$OUT/gpu-$times.trace.json" --json >"$OUT/gpu-$times.summary.json" 2>"$OUT/gpu-$times.export.err"
	echo "export exit $?"
done
python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
        print("  PROBLEM:", what)

def kernels(path):
    ev = json.load(open(path))
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    return [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel"]

def replays(ks, key):
    """Kernels by correlation id (a replay's all share its launch's), each
    replay's in order of key."""
    by = {}
    for k in ks:
        by.setdefault(k["args"].get("correlation"), []).append(k)
    return [sorted(v, key=key) for _, v in sorted(by.items(), key=lambda kv: min(k["ts"] for k in kv[1]))]

def short(name):
    return name.split("<")[0][:60] + ("<" + name.split("<", 1)[1][:70] + "…" if "<" in name else "")

# The profiler: every kernel of its trace is a replay's (it starts after the capture).
prof = kernels(os.path.join(out, "profile.trace.json"))
pr = replays(prof, lambda k: k["ts"])
print(f"profiler: {len(prof)} kernels in {len(pr)} correlation groups")
check(len(prof) == 250, f"the profiler has {len(prof)} kernels, want 250")
check(len(pr) == 50 and all(len(r) == 5 for r in pr), f"the profiler's replays: {[len(r) for r in pr][:10]}…, want 50 of 5")
pnames = [k["name"] for k in pr[0]] if pr else []
pdur = [statistics.mean(r[i]["dur"] for r in pr if len(r) == 5) for i in range(5)] if pr else []

job = json.load(open(os.path.join(out, "gpu-on.job.json")))
lines = job["lines"]
for times in ("on", "off"):
    print(f"--- cudatap, GPU times {times}")
    allk = kernels(os.path.join(out, f"gpu-{times}.trace.json"))
    nodes = [k for k in allk if "graph_node" in k["args"]]
    cr = replays(nodes, lambda k: k["args"]["graph_node"])
    print(f"cudatap: {len(allk)} kernels, {len(nodes)} run by graph replays (the rest: the warm-up), in {len(cr)} correlation groups")
    check(len(nodes) == len(prof) == 250, f"cudatap has {len(nodes)} replayed kernels, the profiler {len(prof)}: want 250 = 250")
    check(len(cr) == 50 and all(len(r) == 5 for r in cr), f"cudatap's replays: {[len(r) for r in cr][:10]}…, want 50 of 5")
    cnames = [k["name"] for k in cr[0]] if cr else []
    for i, (pn, cn) in enumerate(zip(pnames, cnames)):
        print(f"  node {i}: {'same' if pn == cn else 'DIFFERENT'}: {short(cn)}")
    check(cnames == pnames, "node names differ from the profiler's")
    check(all([k["name"] for k in r] == cnames for r in cr), "not every replay runs the same names in node order")
    # The capture site: the graphs.py line of each node.
    for i, k in enumerate(cr[0] if cr else []):
        py = k["args"].get("capture_python_stack") or []
        want = f"graphs.py:{lines[i][1]}"
        ok = bool(py) and want in py[0]
        print(f"  node {i} captured by {k['args'].get('captured_by')} at {py[0] if py else '(no Python stack)'}{'' if ok else '  want ' + want}")
        check(ok, f"node {i}: capture site {py[:1]}, want {want} ({lines[i][0]})")
    timings = {k["args"].get("timing") for k in nodes}
    if times == "on":
        check(timings == {"measured"}, f"timings {timings}, want all measured")
        # In GPU order within a replay, as in node order.
        check(all([k["args"]["graph_node"] for k in sorted(r, key=lambda k: k["ts"])] == list(range(5)) for r in cr),
              "measured replays do not run in node order")
        cdur = [statistics.mean(r[i]["dur"] for r in cr if len(r) == 5) for i in range(5)] if cr else []
        print("  mean duration per node, µs: " + "; ".join(f"node {i}: profiler {p:.2f}, cudatap {c:.2f} ({c / p:.2f}x)" for i, (p, c) in enumerate(zip(pdur, cdur))))
        check(all(0.67 <= c / p <= 1.5 for p, c in zip(pdur, cdur)), "a node's mean duration is not within 1.5x of the profiler's")
    else:
        check(timings <= {"bounded", "unbounded"} and "measured" not in timings, f"timings {timings}, want bounded")
        bad = [k for k in nodes if not (k["args"]["earliest_start"] <= k["ts"] and k["ts"] + k["dur"] <= k["args"]["latest_end"] + 0.001)]
        check(not bad, f"{len(bad)} bounded ops drawn outside their bounds")
    s = json.load(open(os.path.join(out, f"gpu-{times}.summary.json")))
    procs = [p for p in s["processes"] if p["pid"] == json.load(open(os.path.join(out, f"gpu-{times}.job.json")))["pid"]]
    gl = sum(st["graph_launches"] for p in procs for st in p["streams"])
    go = sum(st.get("graph_ops", 0) for p in procs for st in p["streams"])
    print(f"  summary: {gl} graph launches ran {go} GPU ops; graphs not followed: {s['drops']['Limits']['Graphs'] if 'Limits' in s['drops'] else s['drops']}")
    check(gl == 50 and go == 250, f"summary: {gl} graph launches, {go} graph ops; want 50, 250")
    if times == "on":
        d = s["drops"]
        print(f"  GPU times: unmatched {d.get('GPUTimesUnmatched')}, late {d.get('GPUTimesLate')}, unmeasured {d.get('GPUTimesUnmeasured')}, lost {d.get('GPUTimesLost')}")
print("VERDICT: OK" if not problems else "VERDICT: FAIL: " + "; ".join(problems))
sys.exit(1 if problems else 0)
PY
verdict=$?
# HTA on the profiler's trace and on cudatap's, side by side (not part of
# the verdict): HTA counts only cudaLaunchKernel, cuLaunchKernel, memcpy and
# memset calls as launches, so a program that only replays graphs has no
# queue length or launch stats in either.
if python3 -c "import pandas, networkx" 2>/dev/null; then
	for t in profile gpu-on; do
		echo "--- HTA on $t.trace.json"
		timeout 60 python3 "$here/../hta/check.py" "$OUT/$t.trace.json" 2>&1 | tail -12
	done
fi
exit $verdict
