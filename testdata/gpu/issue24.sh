#!/usr/bin/env bash
# On the H200, issue 24 (GPU times by default, a cheap join, the user's own
# profiler never blinded, bounded ops HTA reads right), in one run of about
# 8 minutes; everything it makes goes to OUTDIR, its log to OUTDIR/RESULTS.txt.
# Usage: issue24.sh BIN OUTDIR
#  0. the CUPTI callback ABI the collector reads (offsets, callback names);
#  1. exactness: GPT-2-small (batch 8) and a launch-bound loop, the PyTorch
#     profiler vs cudatap's default trace (busy time and ops per stream),
#     every op measured, none lost at exit; a --gpu-times=off trace too;
#  2. the hand-over: a program that starts torch.profiler midway, under
#     cudatap (launch mode; launch mode with TEARDOWN_CUPTI=1, where Kineto
#     finalizes CUPTI and cudatap takes it back; attach mode), against the
#     same program without cudatap;
#  3. the cost table, 3 interleaved rounds: plain; cudatap --gpu-times=off;
#     cudatap (GPU times, joined through callbacks); cudatap with CUPTI's
#     GPU records only (CUDATAP_GPU_JOIN=none: what the records alone cost,
#     a stream-order join's floor); cudatap joined through CUPTI's API
#     records (CUDATAP_GPU_JOIN=api: the old join). Workloads: x.add_(1)
#     loop (µs per launch), GPT-2-small batch 8 and 32 (ms per step);
#  4. HolisticTraceAnalysis on the default trace and on the --gpu-times=off
#     one, where pandas is installed (else run testdata/hta/check.py on
#     OUTDIR/ct_gpt*.json.gz where it is).
set -u
BIN=$(realpath "$1"); OUT=$(mkdir -p "$2" && realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
W="$here/issue24_workload.py"; G="$here/gputimes_workload.py"; C="$here/issue24_check.py"
exec > >(tee "$OUT/RESULTS.txt") 2>&1
T0=$SECONDS
section() { echo; echo "## $* (at $((SECONDS - T0)) s)"; }
rec() { "$BIN" record --nvml-interval=-1s "$@"; }
"$BIN" version 2>/dev/null | head -2; python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'

section "0. CUPTI callbacks: the ABI the collector reads"
INC=/usr/local/cuda-13.0/targets/x86_64-linux/include
LIB=$(python3 -c 'import os, torch; print(os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "cu13", "lib")))')
[ -e "$LIB/libcupti.so.13" ] || LIB=/usr/local/cuda-13.0/targets/x86_64-linux/lib
cat >"$OUT/cbabi.c" <<'C'
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cupti.h>
int main(void) {
  printf("CUpti_CallbackData: callbackSite %zu functionName %zu correlationData %zu correlationId %zu (collector: 0 8 56 64)\n",
         offsetof(CUpti_CallbackData, callbackSite), offsetof(CUpti_CallbackData, functionName),
         offsetof(CUpti_CallbackData, correlationData), offsetof(CUpti_CallbackData, correlationId));
  printf("domains: driver %d runtime %d (collector: 1 2); sites: enter %d exit %d (0 1)\n",
         CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_API_ENTER, CUPTI_API_EXIT);
  const char *n = 0;
  cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, &n);
  printf("runtime cbid %d is named %s\n", CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, n ? n : "(none)");
  cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &n);
  printf("driver cbid %d is named %s\n", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, n ? n : "(none)");
  static const char *pre[] = {"cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset",
                              "cuLaunchKernel", "cuLaunchCooperativeKernel", "cuLaunchGrid", "cuGraphLaunch", "cuMemcpy", "cuMemset"};
  for (int d = 1; d <= 2; d++) {
    int matched = 0;
    for (unsigned c = 1; c < 4096; c++) {
      if (cuptiGetCallbackName(d, c, &n) != CUPTI_SUCCESS || !n) continue;
      for (unsigned i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (!strncmp(n, pre[i], strlen(pre[i]))) { matched++; if (matched <= 40) printf("  %s", n); break; }
    }
    printf("\n%s domain: %d enqueuing calls get callbacks\n", d == 1 ? "driver" : "runtime", matched);
  }
  return 0;
}
C
gcc -I"$INC" -o "$OUT/cbabi" "$OUT/cbabi.c" -L"$LIB" -l:libcupti.so.13 -Wl,-rpath,"$LIB" 2>&1 | tail -5 && timeout 30 "$OUT/cbabi"

section "1. exactness against the PyTorch profiler, cudatap's default (GPU times on)"
for m in gpt tiny; do
	steps=20; [ $m = tiny ] && steps=30
	timeout 120 python3 "$G" $m --steps $steps --profile "$OUT/kineto_$m.json" >"$OUT/prof_$m.out" 2>&1
	timeout 120 "$BIN" -v record --nvml-interval=-1s -o "$OUT/ct_$m.json.gz" -- python3 "$G" $m --steps $steps >"$OUT/ct_$m.out" 2>"$OUT/ct_$m.err"
	echo "-- $m: record exit $?"
	grep -hE "GPU times|not measured" "$OUT/ct_$m.err" | cut -c1-250 | head -3
	python3 "$here/gputimes_compare.py" "$OUT/kineto_$m.json" "$OUT/ct_$m.json.gz" "$OUT/ct_$m.out"
	python3 "$C" drops "$OUT/ct_$m.json.gz"
	gzip -f "$OUT/kineto_$m.json"
done
timeout 120 "$BIN" record -q --nvml-interval=-1s --gpu-times=off -o "$OUT/ct_gpt_off.json.gz" -- python3 "$G" gpt --steps 20 >"$OUT/ct_gpt_off.out" 2>&1
python3 - "$OUT/ct_gpt_off.json.gz" <<'P'
import gzip, json, math, sys
ev = json.load(gzip.open(sys.argv[1], "rt"))["traceEvents"]
g = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
bad = [e for e in g if e["args"].get("timing") != "measured" and (float(e["dur"]) < 1 or float(e["ts"]) < float(e["args"]["earliest_start"]) or float(e["ts"]) + float(e["dur"]) > float(e["args"]["latest_end"]) + 1e-3)]
neg = [e for e in ev if e.get("ph") == "X" and math.ceil(float(e["ts"])) > math.floor(float(e["ts"]) + float(e["dur"]))]
print(f"--gpu-times=off: {len(g)} GPU slices, {len(bad)} shorter than 1 µs or outside their bounds, {len(neg)} slices HTA would round negative")
P

section "2. the user's own profiler started midway while cudatap holds CUPTI"
timeout 120 python3 "$W" --profile-mid "$OUT/ho_base_kineto.json" >"$OUT/ho_base.out" 2>&1
echo "-- without cudatap: $(tail -1 "$OUT/ho_base.out" | cut -c1-300)"
for v in launch teardown; do
	env=(); [ $v = teardown ] && env=(TEARDOWN_CUPTI=1)
	timeout 150 env "${env[@]}" "$BIN" -v record --nvml-interval=-1s -o "$OUT/ho_$v.json.gz" -- python3 "$W" --profile-mid "$OUT/ho_${v}_kineto.json" >"$OUT/ho_$v.out" 2>"$OUT/ho_$v.err"
	echo "-- $v mode${env:+ (${env[*]})}: record exit $?"
	grep -hE "handed over|again|not measured|not handed|could not be held|cannot watch" "$OUT/ho_$v.err" | cut -c1-250 | head -4
	python3 "$C" handover "$OUT/ho_$v.json.gz" "$OUT/ho_$v.out" "$OUT/ho_base.out"
done
rm -f "$OUT/go"; mkfifo "$OUT/go"
timeout 150 python3 "$W" --profile-mid "$OUT/ho_attach_kineto.json" --wait <"$OUT/go" >"$OUT/ho_attach.out" 2>"$OUT/ho_attach.py.err" &
J=$! # timeout's pid: the program is its child, named by its "ready PID" line (CUDA initialized by then)
exec 3>"$OUT/go"
until grep -q ready "$OUT/ho_attach.out" 2>/dev/null || ! kill -0 $J 2>/dev/null; do sleep 0.2; done
P=$(awk '/^ready/ {print $2; exit}' "$OUT/ho_attach.out")
timeout 150 "$BIN" -v record -p "${P:-0}" --nvml-interval=-1s -o "$OUT/ho_attach.json.gz" >"$OUT/ho_attach.rec.out" 2>"$OUT/ho_attach.err" &
R=$!
until grep -q "attached to" "$OUT/ho_attach.err" 2>/dev/null || ! kill -0 $R 2>/dev/null; do sleep 0.1; done
echo go >&3; exec 3>&-
wait $J; echo "-- attach mode: job exit $?"; wait $R; echo "   record exit $?"
grep -hE "GPU times|handed over|not handed|could not be held|cannot watch" "$OUT/ho_attach.err" | cut -c1-250 | head -4
python3 "$C" handover "$OUT/ho_attach.json.gz" "$OUT/ho_attach.out" "$OUT/ho_base.out"
gzip -f "$OUT"/ho_*_kineto.json

section "3. cost, 3 interleaved rounds (x.add_(1) µs per launch; GPT-2-small ms per step)"
for r in 1 2 3; do
	for how in plain cudatap gputimes kernelonly api; do
		o="$OUT/cost-$r-$how.out"
		case $how in
		plain) timeout 90 python3 "$W" >"$o" 2>&1 ;;
		cudatap) timeout 90 "$BIN" record -q --nvml-interval=-1s --stacks none --gpu-times=off -- python3 "$W" >"$o" 2>/dev/null ;;
		gputimes) timeout 90 "$BIN" record -q --nvml-interval=-1s --stacks none -- python3 "$W" >"$o" 2>/dev/null ;;
		kernelonly) CUDATAP_GPU_JOIN=none timeout 90 "$BIN" record -q --nvml-interval=-1s --stacks none -- python3 "$W" >"$o" 2>/dev/null ;;
		api) CUDATAP_GPU_JOIN=api timeout 90 "$BIN" record -q --nvml-interval=-1s --stacks none -- python3 "$W" >"$o" 2>/dev/null ;;
		esac
	done
	echo "round $r done at $((SECONDS - T0)) s"
done
python3 "$C" cost "$OUT"

section "4. HolisticTraceAnalysis on the default trace and on the --gpu-times=off one"
if python3 -c 'import pandas, networkx, plotly' 2>/dev/null; then
	timeout 120 python3 "$here/../hta/check.py" "$OUT/ct_gpt.json.gz"
	timeout 120 python3 "$here/../hta/check.py" "$OUT/ct_gpt_off.json.gz" --bounded
else
	echo "pandas/networkx/plotly missing here: run testdata/hta/check.py on $OUT/ct_gpt.json.gz and (--bounded) $OUT/ct_gpt_off.json.gz elsewhere"
fi
rm -f "$OUT/go" "$OUT/cbabi"
echo; echo "done in $((SECONDS - T0)) s"; ls -la "$OUT" | head -60
