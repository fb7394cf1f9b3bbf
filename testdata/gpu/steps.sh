#!/usr/bin/env bash
# On the H200: training steps without code changes, and NVTX ranges (issue
# 27 item 5). steps.py trains a small MLP for N steps; cudatap records it
# four ways, and each is checked against what the program itself measured:
#   plain   launched, no annotation: N steps found from the read-back
#           (loss.item()) that repeats once per iteration, ProfilerStep#1..N
#           in both traces, step times against the program's own
#   nvtx    launched, torch.cuda.nvtx ranges per iteration: the collector is
#           the NVTX injection library (NVTX v3 in PyTorch is header-only),
#           with --gpu-times=off too (NVTX needs no CUPTI): N steps from the
#           "train step N" ranges, every range ("forward", "backward",
#           "optimizer") and the mark in the traces
#   attach  the nvtx job, already running (record --pid): torch.cuda.nvtx's
#           own copies of nvtxRangePushA & co. in libtorch_python.so are
#           hooked (found in its .symtab): the same N steps and ranges
#   nosync  launched, no read-back in the loop: no steps, and why
# and, where Python has pandas, HTA's per-step analyses on the plain trace
# (testdata/hta/check.py --steps N). About a minute and a half.
# Usage: steps.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
N=40
fail=0

# check NAME MODE: the summary JSON against the job's own account.
check() {
	python3 - "$1" "$2" "$OUT/$1.summary.json" "$OUT/$1.job.json" "$OUT/$1.json" "$N" <<'PY' || fail=1
import json, statistics, sys
name, mode, summary, job, trace, n = sys.argv[1:7]
n = int(n)
s, j = json.load(open(summary)), json.load(open(job))
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
found = [f for f in s["steps"] if f["pid"] == j["pid"]]
check(len(found) == 1, f"{len(found)} step entries for pid {j['pid']}")
f = found[0] if found else {"steps": []}
for k in ("by", "why", "marker"):  # left out of the JSON when empty
    f.setdefault(k, "")
got = f["steps"]
print(f"{name}: {len(got)} steps, by {f['by'] or '-'} ({f.get('marker', '')}){': ' + f['why'] if f.get('why') else ''}")
events = json.load(open(trace))["traceEvents"]
profiler = [e for e in events if e.get("ph") == "X" and e.get("name", "").startswith("ProfilerStep#")]
nvtx = {}
for e in events:
    if e.get("cat") == "user_annotation" and e.get("args", {}).get("source") == "nvtx":
        key = e["name"].rsplit(" ", 1)[0] if e["name"].startswith("train step ") else e["name"]
        nvtx[key] = nvtx.get(key, 0) + 1
if mode == "nosync":
    check(len(got) == 0 and f["why"], "steps found in a loop that never waits, or no reason given")
    check(len(profiler) == 0, f"{len(profiler)} ProfilerStep slices, want none")
else:
    want_by = "nvtx" if mode == "nvtx" else "sync"
    # A tracer attaching mid-run sees the loop from wherever it came in.
    check(len(got) == n if name != "attach" else len(got) >= n - 1, f"{len(got)} steps, want {n}")
    check(f["by"] == want_by, f"found by {f['by']!r}, want {want_by!r}")
    check(len(profiler) == len(got), f"{len(profiler)} ProfilerStep slices in the trace, {len(got)} steps")
    check(all(e["tid"] == f["tid"] for e in profiler), "ProfilerStep slices off the thread that marks them")
    if want_by == "sync":
        check("steps.py" in f["marker"], f"marker {f['marker']!r} is not a line of steps.py")
    mine = [st["end_ns"] - st["start_ns"] for st in got[1:]]
    theirs = j["step_s"][1:]
    if mine and theirs:
        a, b = statistics.median(mine) / 1e6, statistics.median(theirs) * 1e3
        print(f"  step time, median: cudatap {a:.3f} ms, the program {b:.3f} ms ({100 * (a - b) / b:+.1f}%); p90 cudatap {f['p90_ns'] / 1e6:.3f} ms")
        check(abs(a - b) <= 0.2 * b + 0.2, "cudatap's median step time is off the program's by more than 20%")
    if f.get("gpu_median_ns"):
        print(f"  GPU time per step, median: {f['gpu_median_ns'] / 1e6:.3f} ms ({'measured by CUPTI' if f['gpu_measured'] else 'a lower bound'})")
if mode == "nvtx":
    print(f"  NVTX ranges in the trace: {dict(sorted(nvtx.items()))}")
    for r in ["train step", "forward", "backward", "optimizer"]:
        check(nvtx.get(r, 0) == n, f"{nvtx.get(r, 0)} {r!r} ranges, want {n}")
    check(nvtx.get("checkpoint", 0) == 1, "no checkpoint mark")
for p in problems:
    print(f"  FAIL {p}")
print(f"  {name}: {'FAIL' if problems else 'ok'}")
sys.exit(1 if problems else 0)
PY
}

record() { # NAME MODE [record flags...]
	local name=$1 mode=$2
	shift 2
	timeout 150 "$BIN" record --json -o "$OUT/$name.json" -o "$OUT/$name.perfetto-trace" "$@" -- \
		python3 "$here/steps.py" "$mode" "$N" "$OUT/$name.job.json" >"$OUT/$name.summary.json" 2>"$OUT/$name.stderr"
	echo "record $name: exit $?"
	check "$name" "$mode"
}

record plain plain
record nvtx nvtx
record nvtx-no-gpu-times nvtx --gpu-times=off
record nosync nosync

# attach: the same nvtx job, already running.
rm -f "$OUT/go"
python3 "$here/steps.py" nvtx "$N" "$OUT/attach.job.json" --wait-file "$OUT/go" >"$OUT/attach.stdout" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q '^ready' "$OUT/attach.stdout" && break; sleep 0.1; done
timeout 150 "$BIN" record --json --pid "$job" -o "$OUT/attach.json" >"$OUT/attach.summary.json" 2>"$OUT/attach.stderr" &
rec=$!
# cudatap says when it is attached; then the loop may go.
for _ in $(seq 600); do grep -q 'attached' "$OUT/attach.stderr" && break; sleep 0.1; done
touch "$OUT/go"
wait "$job"
echo "attach: job exit $?"
wait "$rec"
echo "record attach: exit $?"
check attach nvtx

if python3 -c 'import pandas, numpy, networkx, plotly, yaml, psutil, pydot' 2>/dev/null; then
	echo "=================== HTA's per-step analyses on the plain trace"
	python3 "$here/../hta/check.py" "$OUT/plain.json" --steps "$N" || fail=1
else
	echo "(HTA not run: this Python lacks pandas and the rest of testdata/hta's dependencies)"
fi
echo "verdict: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
