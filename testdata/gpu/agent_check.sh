#!/usr/bin/env bash
# On the H200: cudatap agent (--continuous) while PyTorch's launch_counts.py
# runs, then its /metrics for that process against the profiler's counts.
# Usage: agent_check.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
"$BIN" agent --continuous --listen 127.0.0.1:9400 >"$OUT/agent.out" 2>&1 &
A=$!
until curl -sf 127.0.0.1:9400/healthz >/dev/null 2>&1; do sleep 0.2; done
python3 "$here/launch_counts.py" eager >"$OUT/eager.stdout" 2>"$OUT/eager.stderr"
sleep 1 # the reader drains what is queued
curl -s 127.0.0.1:9400/metrics >"$OUT/metrics.txt"
kill -INT $A; wait $A
tail -1 "$OUT/eager.stdout"
grep -E "^cudatap_(kernel_launches_total|syncs_total|agent_dropped|agent_events)" "$OUT/metrics.txt" | head -12
grep -E '^cudatap_cuda_calls_total' "$OUT/metrics.txt" | grep -i launch | head -6
