#!/usr/bin/env bash
# On the H200: record --gpu-times checked against PyTorch's profiler, and
# its cost. Usage: gputimes.sh BIN OUTDIR
#  1. launch mode: the same GPT-2-small training run, once under PyTorch's
#     profiler (CUPTI, Kineto trace), once under cudatap record --gpu-times
#     (the collector loaded through CUDA_INJECTION64_PATH): busy per stream;
#  2. cost: ms per step with no tracer, cudatap, cudatap --gpu-times, for a
#     launch-bound loop and the GPT-2-small step;
#  3. attach mode: cudatap record -p PID --gpu-times on a running job (the
#     collector loaded by ptrace), which must finish normally afterwards.
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
W="$here/gputimes_workload.py"
line() { grep '^{"mode"' "$1" | tail -1; }

echo "## 1. launch mode vs the profiler (GPT-2-small, 20 steps)"
python3 "$W" gpt --steps 20 --profile "$OUT/kineto_gpt.json" >"$OUT/prof_gpt.out" 2>&1
"$BIN" -v record --gpu-times --nvml-interval=-1s -o "$OUT/ct_gpt.json" -o "$OUT/ct_gpt.cudatap" -- python3 "$W" gpt --steps 20 >"$OUT/ct_gpt.out" 2>"$OUT/ct_gpt.err"
echo "record exit $?"; grep -iE "GPU time" "$OUT/ct_gpt.err" | head -3; grep -h "dropped" "$OUT/ct_gpt.out" "$OUT/ct_gpt.err"
grep -E "calls over|dropped|GPU times|measured" "$OUT/ct_gpt.out" | head -6
python3 "$W" tiny --steps 30 --profile "$OUT/kineto_tiny.json" >"$OUT/prof_tiny.out" 2>&1
"$BIN" record --gpu-times --nvml-interval=-1s -o "$OUT/ct_tiny.json" -- python3 "$W" tiny --steps 30 >"$OUT/ct_tiny.out" 2>"$OUT/ct_tiny.err"
echo "-- launch-bound loop (30 x 1000 tiny kernels)"
python3 "$here/gputimes_compare.py" "$OUT/kineto_tiny.json" "$OUT/ct_tiny.json" "$OUT/ct_tiny.out"
echo "-- GPT-2-small"
python3 "$here/gputimes_compare.py" "$OUT/kineto_gpt.json" "$OUT/ct_gpt.json" "$OUT/ct_gpt.out"

echo "## 2. cost (ms per step, median of 3 runs each)"
for mode in tiny gpt; do
	steps=20; [ $mode = tiny ] && steps=30
	for how in none cudatap gputimes; do
		for i in 1 2 3; do
			case $how in
			none) python3 "$W" $mode --steps $steps >"$OUT/cost.out" 2>&1 ;;
			cudatap) "$BIN" record --nvml-interval=-1s --stacks none -- python3 "$W" $mode --steps $steps >"$OUT/cost.out" 2>/dev/null ;;
			gputimes) "$BIN" record --gpu-times --nvml-interval=-1s --stacks none -- python3 "$W" $mode --steps $steps >"$OUT/cost.out" 2>/dev/null ;;
			esac
			line "$OUT/cost.out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ms_per_step"])'
		done | sort -n | sed -n 2p | xargs printf "%s %-9s %s ms/step\n" $mode $how
	done
done

echo "## 3. attach mode: -p PID --gpu-times on a running GPT-2-small job"
rm -f "$OUT/go"; mkfifo "$OUT/go"
python3 "$W" gpt --steps 150 --wait <"$OUT/go" >"$OUT/att_py.out" 2>"$OUT/att_py.err" &
P=$!
exec 3>"$OUT/go"
while ! grep -q ready "$OUT/att_py.out" 2>/dev/null; do sleep 0.2; done
"$BIN" -v record -p $P --gpu-times -d 6s --nvml-interval=-1s -o "$OUT/attach.json" -o "$OUT/attach.cudatap" >"$OUT/att_rec.out" 2>"$OUT/att_rec.err" &
R=$!
until grep -q "attached to" "$OUT/att_rec.err" 2>/dev/null || ! kill -0 $R 2>/dev/null; do sleep 0.1; done
echo go >&3; exec 3>&-
wait $R; echo "record exit $?"
wait $P; echo "job exit $? (after cudatap detached)"; line "$OUT/att_py.out"
grep -iE "GPU time|refus|ptrace" "$OUT/att_rec.err" | head -5; grep -h dropped "$OUT/att_rec.out"
grep -E "calls over|dropped|GPU times" "$OUT/att_rec.out" | head -5
python3 - "$OUT/attach.json" <<'P'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
g = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "timing" in e.get("args", {})]
from collections import Counter
print("attach: GPU slices by timing:", dict(Counter(e["args"]["timing"] for e in g)))
P
ls -la "$OUT"
