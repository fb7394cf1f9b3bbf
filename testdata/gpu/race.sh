#!/usr/bin/env bash
# On the H200: side-stream races found with kernel arguments (issue 26 item
# 1). race.py is recorded three times with --kernel-args --stacks all: race
# (work on a side stream read on the default stream with no wait: a cuBLAS
# matmul and a copy, each read by a kernel, and a kernel read back by a
# copy), mul (an elementwise kernel read by a kernel: PyTorch's own kernel
# where the matmul's is cuBLAS's; then the same with a mul reading, and a
# copy read by an add: which of them is found tells a kernel's parameter
# layout from its stream) and fixed (every case, wait_stream before each
# read). The check: in race and mul, cross-stream-race has each case
# at its two marked lines of race.py, with what the calls prove; in fixed
# it does not fire. With CUDATAP_TRACER_TEST=PATH (a tracer.test
# built from this tree: go test -c -o tracer.test ./tracer/) it also
# measures what --kernel-args adds per launch to a launch-bound PyTorch loop
# (BenchmarkTorchProbeCost, probecost.py, interleaved rounds). Under two
# minutes.
# Usage: race.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
fail=0
for mode in race mul fixed; do
	echo "=================== $mode"
	timeout 50 "$BIN" record --kernel-args --stacks all --gpu-times=off --nvml-interval=-1s -o "$OUT/$mode.cudatap" \
		-- python3 "$here/race.py" $mode "$OUT/$mode.job.json" >"$OUT/$mode.summary" 2>"$OUT/$mode.stderr"
	echo "record exit $?"
	tail -n 3 "$OUT/$mode.stderr" | cut -c1-300
	grep -m1 "dropped events" "$OUT/$mode.summary"
	"$BIN" lint --fail-on error "$OUT/$mode.cudatap" >"$OUT/$mode.lint" 2>&1
	echo "lint --fail-on error: exit $? (7: an error fired)"
	"$BIN" lint --json "$OUT/$mode.cudatap" >"$OUT/$mode.lint.json" 2>"$OUT/$mode.lint.err"
	python3 - "$mode" "$OUT/$mode.lint.json" "$OUT/$mode.job.json" <<'PY' || fail=1
import json, os, re, sys
mode, lint, job = sys.argv[1:]
doc, j = json.load(open(lint)), json.load(open(job))
lines = j["lines"]
def line_of(site):  # "path/race.py:42 step" -> 42 when in race.py
    m = re.match(r"(.*):(\d+)(\s|$)", site or "")
    return int(m.group(2)) if m and os.path.basename(m.group(1)) == "race.py" else None
races = [f for f in doc["findings"] if f["id"] == "cross-stream-race" and f["pid"] == j["pid"]]
examples = [e for f in races for e in f["examples"]]
for f in races:
    print(f"{f['level']}: {f['summary']}")
for e in examples:
    w, u = e["calls"][0], e["calls"][1]
    print(f"  x{e['count']} [{e.get('proof', '')}] {w['role']} {w['call']} {w.get('kernel', '')} at {w['site']} (stream {w['stream']})"
          f" -> {u['role']} {u['call']} {u.get('kernel', '')} at {u['site']} (stream {u['stream']})")
problems = []
cases = {"race": {"matmul": "kernels", "copy": "write then kernel", "cpu": "kernel then use"},
         "mul": {"mul": "kernels", "mulmul": "kernels", "copyadd": "write then kernel"}, "fixed": {}}[mode]
for case, proof in cases.items():
    w, u = lines[case + "-write"], lines[case + "-read"]
    hit = [e for e in examples if line_of(e["calls"][0]["site"]) == w and line_of(e["calls"][1]["site"]) == u]
    print(f"{case}: race.py:{w} -> race.py:{u}: {'found, ' + hit[0].get('proof', '') if hit else 'NOT FOUND'}")
    if not hit:
        problems.append(f"{case} race (race.py:{w} -> race.py:{u}) not found")
    elif hit[0].get("proof") != proof:
        problems.append(f"{case} race proven as {hit[0].get('proof')!r}, want {proof!r}")
if mode == "fixed" and races:
    problems.append(f"the fixed version fires cross-stream-race: {[f['summary'] for f in races]}")
print(f"{mode}: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
sys.exit(1 if problems else 0)
PY
done
if [ -n "${CUDATAP_TRACER_TEST:-}" ]; then
	echo "=================== cost per launch: PyTorch x.add_(1) x 20,000, interleaved rounds"
	CUDATAP_PROBECOST_ROUNDS=${ROUNDS:-7} CUDATAP_PROBECOST_SCRIPT="$here/probecost.py" \
		timeout 60 "$CUDATAP_TRACER_TEST" -test.run '^$' -test.bench TorchProbeCost -test.benchtime 1x -test.v 2>&1 |
		grep -E "median|_ns|ok|FAIL" | tee "$OUT/cost.txt"
fi
[ $fail = 0 ] && echo "race.sh: PASS" || echo "race.sh: FAIL"
exit $fail
