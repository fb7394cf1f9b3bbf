#!/usr/bin/env bash
# On the H200: cudatap agent (--continuous, NVML every second) while a
# PyTorch job (agent_nvml.py) runs matmuls on two streams holding 4 GiB;
# /metrics in the middle of the run against nvidia-smi at the same moment,
# and the per-stream launch counts at the end against what the job queued.
# Usage: agent_nvml.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
"$BIN" agent --continuous --listen 127.0.0.1:9400 --nvml-interval 1s >"$OUT/agent.out" 2>&1 &
A=$!
until curl -sf 127.0.0.1:9400/healthz >/dev/null 2>&1; do sleep 0.2; done
python3 "$here/agent_nvml.py" 12 >"$OUT/job.stdout" 2>"$OUT/job.stderr" &
J=$!
sleep 8
curl -s 127.0.0.1:9400/metrics >"$OUT/metrics-mid.txt"
nvidia-smi --query-gpu=index,uuid,name,utilization.gpu,memory.used,power.draw,temperature.gpu,clocks.sm --format=csv >"$OUT/smi-mid.csv"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >>"$OUT/smi-mid.csv"
wait $J
sleep 2 # the next once-a-second launch count
curl -s 127.0.0.1:9400/metrics >"$OUT/metrics-end.txt"
kill -INT $A; wait $A
echo "== job"; cat "$OUT/job.stdout"
echo "== nvidia-smi, mid-run"; cat "$OUT/smi-mid.csv"
echo "== agent, mid-run: device series (GPU 0) and per-process memory"
grep -E '^cudatap_gpu_[a-z_]+\{' "$OUT/metrics-mid.txt" | grep -E 'gpu="0"' | head -20
grep -E '^cudatap_gpu_process_memory_used_bytes' "$OUT/metrics-mid.txt"
grep -E '^cudatap_agent_nvml_up' "$OUT/metrics-mid.txt"
echo "== agent, end: launches by stream and in all"
grep -E '^cudatap_(stream_launches_total|kernel_launches_total|agent_dropped_events_total)' "$OUT/metrics-end.txt"
