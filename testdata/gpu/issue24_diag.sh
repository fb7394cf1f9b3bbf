#!/usr/bin/env bash
# On the H200, why GPU ops go unmeasured with the callback join (issue 24),
# in about 3 minutes; everything goes to OUTDIR, the summary to OUTDIR/DIAG.txt.
# Usage: issue24_diag.sh BIN OUTDIR
#  1. the names of the callback ids CUPTI reports for enqueuing calls;
#  2. GPT-2-small batch 8 (5 steps) and the x.add_(1) loop (5 steps) under
#     cudatap record with CUDATAP_GPUTIME_DEBUG (the collector's call and GPU
#     records, the model's misses), summarized by issue24_diag.py: unmeasured
#     ops by kernel × thread × API and what the collector recorded around
#     them, misses by reason × kernel × thread × CUPTI call;
#  3. the loop's kernel durations: the profiler's, cudatap's (CLOCK_MONOTONIC
#     through CUPTI's timestamp callback) and cudatap's with CUPTI's own clock
#     (CUDATAP_CUPTI_CLOCK=cupti), to tell a clock that stretches times;
#  4. the launch loop's cost, 3 interleaved rounds: plain, --gpu-times=off,
#     callbacks, none, api, with cudatap's CPU time and drops for each.
set -u
BIN=$(realpath "$1"); OUT=$(mkdir -p "$2" && realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
W="$here/issue24_workload.py"; G="$here/gputimes_workload.py"; D="$here/issue24_diag.py"
exec > >(tee "$OUT/DIAG.txt") 2>&1
T0=$SECONDS
section() { echo; echo "# $* (at $((SECONDS - T0)) s)"; }
"$BIN" version 2>/dev/null | head -1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

section "1. CUPTI's callback ids of enqueuing calls"
INC=/usr/local/cuda-13.0/targets/x86_64-linux/include
LIB=$(python3 -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib")))')
[ -e "$LIB/libcupti.so.13" ] || LIB=/usr/local/cuda-13.0/targets/x86_64-linux/lib
cat >"$OUT/cbids.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <cupti.h>
int main(void) {
  static const char *pre[] = {"cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset",
                              "cuLaunchKernel", "cuLaunchCooperativeKernel", "cuLaunchGrid", "cuGraphLaunch", "cuMemcpy", "cuMemset"};
  const char *n;
  for (int d = 1; d <= 2; d++)
    for (unsigned c = 1; c < 4096; c++) {
      if (cuptiGetCallbackName(d, c, &n) != CUPTI_SUCCESS || !n) continue;
      for (unsigned i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (!strncmp(n, pre[i], strlen(pre[i]))) { printf("%s\t%u\t%s\n", d == 1 ? "driver" : "runtime", c, n); break; }
    }
  return 0;
}
C
gcc -I"$INC" -o "$OUT/cbids" "$OUT/cbids.c" -L"$LIB" -l:libcupti.so.13 -Wl,-rpath,"$LIB" 2>&1 | tail -3
timeout 30 "$OUT/cbids" >"$OUT/cbids.tsv"; echo "$(wc -l <"$OUT/cbids.tsv") enqueuing callback ids named"

section "2. GPT-2-small batch 8 and the launch loop, the join's diagnosis"
for m in gpt tiny; do
	rm -rf "$OUT/dbg_$m"
	CUDATAP_GPUTIME_DEBUG="$OUT/dbg_$m" timeout 120 "$BIN" -v record --nvml-interval=-1s -o "$OUT/diag_$m.json.gz" -- python3 "$G" $m --steps 5 >"$OUT/diag_$m.out" 2>"$OUT/diag_$m.err"
	echo "## $m: record exit $?"
	grep -hE "GPU times|not measured|lost" "$OUT/diag_$m.err" | cut -c1-250 | head -4
	python3 "$here/issue24_check.py" drops "$OUT/diag_$m.json.gz"
	python3 "$D" join "$OUT/diag_$m.json.gz" "$OUT/dbg_$m" "$OUT/cbids.tsv"
done

section "3. kernel durations of the launch loop: the profiler, cudatap, cudatap on CUPTI's clock"
timeout 120 python3 "$G" tiny --steps 5 --profile "$OUT/kineto_tiny.json" >"$OUT/prof_tiny.out" 2>&1
CUDATAP_CUPTI_CLOCK=cupti timeout 120 "$BIN" record -q --nvml-interval=-1s -o "$OUT/diag_tiny_cupticlock.json.gz" -- python3 "$G" tiny --steps 5 >/dev/null 2>&1
python3 "$D" clock "$OUT/kineto_tiny.json" "$OUT/diag_tiny.json.gz" "$OUT/diag_tiny_cupticlock.json.gz"
gzip -f "$OUT/kineto_tiny.json"

section "4. the launch loop's cost, 3 interleaved rounds (µs per launch; CPU s of the run: the traced program and cudatap together)"
# timed HOW CMD...: CMD's stdout to cost-$r-HOW.out, its CPU time (its
# children's too) to cost-$r-HOW.time
timed() {
	local how=$1 TIMEFORMAT="cpu user %U sys %S wall %R"; shift
	{ time "$@" >"$OUT/cost-$r-$how.out" 2>/dev/null; } 2>"$OUT/cost-$r-$how.time"
}
L=(python3 "$W" --modes tiny --steps-tiny 10)
for r in 1 2 3; do
	for how in plain cudatap gputimes kernelonly api; do
		rec=("$BIN" record -q --nvml-interval=-1s --stacks none -o "$OUT/cost-$r-$how.json.gz")
		case $how in
		plain) timed $how timeout 60 "${L[@]}" ;;
		cudatap) timed $how timeout 60 "${rec[@]}" --gpu-times=off -- "${L[@]}" ;;
		gputimes) timed $how timeout 60 "${rec[@]}" -- "${L[@]}" ;;
		kernelonly) timed $how env CUDATAP_GPU_JOIN=none timeout 60 "${rec[@]}" -- "${L[@]}" ;;
		api) timed $how env CUDATAP_GPU_JOIN=api timeout 60 "${rec[@]}" -- "${L[@]}" ;;
		esac
	done
	echo "round $r done at $((SECONDS - T0)) s"
done
python3 "$here/issue24_check.py" cost "$OUT"
for how in plain cudatap gputimes kernelonly api; do
	echo "-- $how: $(cat "$OUT"/cost-*-$how.time 2>/dev/null | tr '\n' ';')"
	[ $how = plain ] || python3 - "$OUT/cost-1-$how.json.gz" <<'P'
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1], "rt"))["cudatap"]["drops"]
print("   round 1 drops (non-zero):", {k: v for k, v in d.items() if v})
P
done
rm -f "$OUT/cbids" "$OUT"/cost-[23]-*.json.gz
echo; echo "done in $((SECONDS - T0)) s"
