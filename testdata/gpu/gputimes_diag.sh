#!/usr/bin/env bash
# On the H200: a short look at what CUPTI's records look like to the
# collector: impossible records printed, with CUPTI's timestamp callback
# and with CUPTI's own clock. Usage: gputimes_diag.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
W="$here/gputimes_workload.py"
[ -f "$OUT/kineto_gpt.json" ] || python3 "$W" gpt --steps 20 --profile "$OUT/kineto_gpt.json" >/dev/null 2>&1
for clock in callback cupti; do
	echo "## clock: $clock"
	env CUDATAP_GPUTIME_DEBUG=1 $([ $clock = cupti ] && echo CUDATAP_CUPTI_CLOCK=cupti) "$BIN" -v record --gpu-times --nvml-interval=-1s -o "$OUT/d_$clock.json" -- python3 "$W" gpt --steps 20 >"$OUT/d_$clock.out" 2>"$OUT/d_$clock.err"
	grep -E "impossible|lost|measured by" "$OUT/d_$clock.err" | cut -c1-400 | head -8
	grep -h dropped "$OUT/d_$clock.out"
	python3 "$here/gputimes_compare.py" "$OUT/kineto_gpt.json" "$OUT/d_$clock.json" "$OUT/d_$clock.out"
done
