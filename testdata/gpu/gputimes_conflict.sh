#!/usr/bin/env bash
# On the H200: --gpu-times next to PyTorch's profiler, and the kernels it
# names. Usage: gputimes_conflict.sh BIN OUTDIR
#  a. attached to a running GPT-2-small job: kernels left unnamed, with and
#     without --gpu-times (cuBLASLt's, loaded before the attach);
#  b. the profiler already running in the target: --gpu-times must refuse
#     and leave the profiler's trace whole;
#  c. cudatap attached first, the profiler started afterwards: what each gets.
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
W="$here/gputimes_workload.py"
attach() { # attach NAME WORKLOAD-ARGS... ; cudatap args in CT_ARGS
	local name=$1; shift
	rm -f "$OUT/go"; mkfifo "$OUT/go"
	python3 "$W" "$@" <"$OUT/go" >"$OUT/$name.py.out" 2>"$OUT/$name.py.err" &
	local P=$!
	exec 3>"$OUT/go"
	while ! grep -q ready "$OUT/$name.py.out" 2>/dev/null; do sleep 0.2; done
	"$BIN" record -p $P $CT_ARGS -d 4s --nvml-interval=-1s -o "$OUT/$name.json" >"$OUT/$name.rec.out" 2>"$OUT/$name.rec.err" &
	local R=$!
	until grep -q "attached to" "$OUT/$name.rec.err" 2>/dev/null || ! kill -0 $R 2>/dev/null; do sleep 0.1; done
	echo go >&3; exec 3>&-
	wait $R; echo "$name: record exit $?"
	wait $P; echo "$name: job exit $?"
	grep -h "profiler kernels" "$OUT/$name.py.out"
	grep -hi "gpu times\|warn" "$OUT/$name.rec.err" | cut -c1-300 | head -3
	python3 - "$OUT/$name.json" <<'P'
import json, sys, collections
ev = json.load(open(sys.argv[1]))["traceEvents"]
k = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel" and "timing" in e.get("args", {})]
print("  kernels", len(k), "unnamed", sum(1 for e in k if e["name"].startswith("kernel@0x")),
      "timing", dict(collections.Counter(e["args"]["timing"] for e in k)))
P
}
echo "## a. names, attached to GPT-2-small"
CT_ARGS="" attach plain gpt --steps 60 --wait
CT_ARGS="--gpu-times" attach gputimes gpt --steps 60 --wait
[ "${ONLY_NAMES:-}" ] && exit 0
echo "## b. the profiler runs first"
CT_ARGS="--gpu-times" attach proffirst gpt --steps 40 --wait-inside --profile "$OUT/b_kineto.json"
echo "## c. cudatap first, then the profiler"
W="$here/hta_compare.py" CT_ARGS="--gpu-times" attach ctfirst "$OUT/c_kineto.json" 30
python3 -c 'import json,sys; ev=json.load(open(sys.argv[1]))["traceEvents"]; print("  profiler kernels (started after cudatap):", sum(1 for e in ev if e.get("cat")=="kernel"))' "$OUT/c_kineto.json"
