#!/usr/bin/env bash
# On the H200, the check of issue 24 item 1 (an exact GPU-time join, as
# cheap as CUPTI's kernel records, nothing lost at exit), in at most 150
# seconds. Writes two files: OUTDIR/CHECK.txt (the summary and verdicts)
# and OUTDIR/debug.tgz (< 5 MB: the traces, cudatap's logs and its join's
# diagnosis, to tell why a verdict failed).
# Usage: issue24_check.sh BIN OUTDIR
#  1. GPT-2-small batch 8, 5 steps (gputimes_workload.py gpt): once under
#     the PyTorch profiler, once under `cudatap record` (GPU times on, its
#     default; CUDATAP_GPUTIME_DEBUG on): per stream, the kernels, copies and
#     memsets each counts and their names, busy time, every drop counter,
#     the join's misses by reason (late, second measurement, unmatched:
#     0 wanted) and the ops CUPTI alone saw (shown, on their stream, with
#     the CUPTI call they came under);
#  2. the x.add_(1) launch loop (issue24_workload.py tiny, 40,000
#     launches a run), 3 interleaved rounds of plain, cudatap
#     --gpu-times=off and cudatap: µs per launch, and what GPU times add
#     over cudatap alone (aim ≤ 1.5 µs); then, in the time left, rounds of
#     the other joins (CUDATAP_GPU_JOIN=none: CUPTI's GPU records alone, the
#     floor of any join; api: CUPTI's API records) beside cudatap alone.
set -u
BIN=$(realpath "$1"); OUT=$(mkdir -p "$2" && realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
G="$here/gputimes_workload.py"; W="$here/issue24_workload.py"; C="$here/issue24_check.py"
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
rm -f "$OUT/CHECK.txt" "$OUT/debug.tgz"
exec > >(tee "$OUT/CHECK.txt") 2>&1
T0=$SECONDS
BUDGET=${BUDGET:-150} # seconds; BUDGET=60: the exactness check (part 1) alone
section() { echo; echo "## $* (at $((SECONDS - T0)) s)"; }
left() { echo $((BUDGET - (SECONDS - T0))); }
"$BIN" version 2>/dev/null | head -1; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

# CUPTI's names of its callback ids, so the diagnosis names the calls
# (a second at most; the diagnosis says cbid numbers without it).
INC=/usr/local/cuda-13.0/targets/x86_64-linux/include
LIB=$(python3 -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib")))')
[ -e "$LIB/libcupti.so.13" ] || LIB=/usr/local/cuda-13.0/targets/x86_64-linux/lib
cat >"$WORK/cbids.c" <<'EOF'
#include <stdio.h>
#include <cupti.h>
int main(void) {
  const char *n;
  for (int d = 1; d <= 2; d++)
    for (unsigned c = 1; c < 4096; c++)
      if (cuptiGetCallbackName(d, c, &n) == CUPTI_SUCCESS && n) printf("%s\t%u\t%s\n", d == 1 ? "driver" : "runtime", c, n);
  return 0;
}
EOF
gcc -I"$INC" -o "$WORK/cbids" "$WORK/cbids.c" -L"$LIB" -l:libcupti.so.13 -Wl,-rpath,"$LIB" >"$WORK/cbids.err" 2>&1 &&
	timeout 10 "$WORK/cbids" >"$WORK/cbids.tsv" 2>>"$WORK/cbids.err"

section "1. GPT-2-small b8, 5 steps: the PyTorch profiler and cudatap (GPU times on), per stream"
timeout 60 python3 "$G" gpt --steps 5 --profile "$WORK/kineto_gpt.json" >"$WORK/prof_gpt.out" 2>&1
echo "profiler run: exit $?"
CUDATAP_GPUTIME_DEBUG="$WORK/dbg" timeout 60 "$BIN" -v record --nvml-interval=-1s -o "$WORK/ct_gpt.json.gz" \
	-- python3 "$G" gpt --steps 5 >"$WORK/ct_gpt.out" 2>"$WORK/ct_gpt.err"
echo "cudatap run: exit $?"
grep -hE "GPU times|not measured|lost|error" "$WORK/ct_gpt.err" | cut -c1-300 | head -5
python3 "$C" exact "$WORK/kineto_gpt.json" "$WORK/prof_gpt.out" "$WORK/ct_gpt.json.gz" "$WORK/ct_gpt.out" "$WORK/dbg" "$WORK/cbids.tsv"

section "2. the launch loop's cost, 3 interleaved rounds (µs per launch)"
L=(python3 "$W" --modes tiny --steps-tiny 40)
# cost_run ROUND HOW: one run of the loop, its JSON line to cost-ROUND-HOW.out.
cost_run() {
	local o="$WORK/cost-$1-$2.out"
	local rec=("$BIN" record -q --nvml-interval=-1s --stacks none -o "$WORK/cost-$1-$2.json.gz")
	case $2 in
	plain) timeout 30 "${L[@]}" >"$o" 2>&1 ;;
	cudatap) timeout 30 "${rec[@]}" --gpu-times=off -- "${L[@]}" >"$o" 2>&1 ;;
	gputimes) timeout 30 "${rec[@]}" -- "${L[@]}" >"$o" 2>&1 ;;
	kernelonly) CUDATAP_GPU_JOIN=none timeout 30 "${rec[@]}" -- "${L[@]}" >"$o" 2>&1 ;;
	api) CUDATAP_GPU_JOIN=api timeout 30 "${rec[@]}" -- "${L[@]}" >"$o" 2>&1 ;;
	esac
	echo "round $1 $2: exit $?"
}
for r in 1 2 3; do
	# A round takes about 20 s; one that cannot end within the budget is
	# left out, and said.
	if [ "$(left)" -lt 25 ]; then
		echo "round $r left out: $(left) s of the budget left"
		break
	fi
	for how in plain cudatap gputimes; do
		cost_run $r $how
	done
done
# The other joins, while the budget lasts: a round of each beside
# cudatap alone (numbered on from the rounds above).
for r in 4 5 6; do
	[ "$(left)" -lt 25 ] && break
	for how in cudatap kernelonly api; do
		cost_run $r $how
	done
done
python3 "$C" cost "$WORK"
# What each join lost on the loop (its first run): an exact join loses nothing.
for how in gputimes api kernelonly; do
	f=$(ls "$WORK"/cost-*-$how.json.gz 2>/dev/null | head -1)
	[ -n "$f" ] || continue
	# none joins nothing: its records are all lost by design, no verdict.
	python3 "$C" drops "$f" 2>/dev/null | { if [ $how = kernelonly ]; then grep -v PASS; else cat; fi; } |
		{ if [ $how = kernelonly ]; then grep -v FAIL; else cat; fi; } | sed "s/^/launch loop, $how ($(basename "$f" .json.gz)): /"
done

section "debug.tgz"
gzip -f "$WORK/kineto_gpt.json" 2>/dev/null
# The launch loop's traces are megabytes each and their drops are above.
rm -f "$WORK/cbids" "$WORK"/cost-*.json.gz
gzip -rf "$WORK/dbg" 2>/dev/null
tar -C "$WORK" -czf "$OUT/debug.tgz" . 2>/dev/null
# The device returns small files only: past 5 MB, the largest go first.
for f in kineto_gpt.json.gz ct_gpt.json.gz; do
	[ "$(stat -c %s "$OUT/debug.tgz")" -lt 5000000 ] && break
	echo "left out of debug.tgz (size): $f"
	rm -f "$WORK/$f"
	tar -C "$WORK" -czf "$OUT/debug.tgz" .
done
echo "debug.tgz: $(stat -c %s "$OUT/debug.tgz") bytes: $(tar -tzf "$OUT/debug.tgz" | grep -v '/$' | tr '\n' ' ' | cut -c1-400)"
echo; echo "done in $((SECONDS - T0)) s (budget $BUDGET s)"
