#!/usr/bin/env bash
# On a GPU machine: tracing overhead on a PyTorch training loop, and NVML
# counters against nvidia-smi at the same moment. Usage: gpu-perf.sh BIN [OUTDIR]
set -u
BIN=$(realpath "$1"); OUT=${2:-${OUT:-/tmp/cudatap-gpu-perf}}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
steps=3000
echo "== training loop, $steps steps: untraced vs traced (interleaved, 2 rounds)"
for round in 1 2; do
	python3 "$here/train_loop.py" $steps | tail -1 | sed "s/^/untraced      /"
	for st in none sync all; do
		"$BIN" record --stacks $st --nvml-interval=-1s -o "$OUT/loop_$st.cudatap" -- python3 "$here/train_loop.py" $steps 2>/dev/null | grep '^{' | sed "s/^/stacks=$st  /"
	done
done
"$BIN" syncs --top 3 "$OUT/loop_sync.cudatap" | head -20

echo "== NVML vs nvidia-smi while a job runs"
python3 "$here/train_loop.py" 400000 >/tmp/bg.out 2>&1 &
BG=$!
while ! grep -q ready /tmp/bg.out 2>/dev/null; do sleep 0.2; done
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,memory.total,power.draw,clocks.sm --format=csv -lms 1000 >"$OUT/smi.csv" &
SMI=$!
"$BIN" record -p $BG -d 5s -o "$OUT/nvml.json.gz" -o "$OUT/nvml.cudatap" 2>&1 | sed -n '/GPUs (NVML)/,$p'
kill $SMI
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
cat "$OUT/smi.csv"
kill $BG
python3 - "$OUT/nvml.json.gz" <<'PY'
import gzip, json, sys
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
c = [e for e in ev if e.get("ph") == "C"]
names = {e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "process_name" and e["pid"] >= 2_000_000_000}
print(f"chrome counter events: {len(c)}; tracks: {sorted(names)}")
if c:
    u = [e["args"].get("gpu_util_pct") for e in c if "gpu_util_pct" in e["args"]]
    m = [e["args"].get("mem_used_bytes") for e in c if "mem_used_bytes" in e["args"]]
    print(f"gpu_util_pct mean {sum(u)/len(u):.1f} min {min(u)} max {max(u)}; mem_used MiB max {max(m)/2**20:.0f}")
PY
