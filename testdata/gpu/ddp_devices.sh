#!/usr/bin/env bash
# On the 2×H200 machine: a 2-rank DDP job (rank r on GPU r after
# torch.cuda.set_device(r)) traced with --all; prints the GPU ops of each
# rank by the device cudatap attributed them to, and HTA on the trace.
# Usage: ddp_devices.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
"$BIN" record --all --nvml-interval=-1s -o "$OUT/ddp.json" >"$OUT/rec.out" 2>"$OUT/rec.err" &
R=$!
until grep -q "attached to" "$OUT/rec.err" 2>/dev/null; do sleep 0.1; done
STEPS=30 torchrun --nproc_per_node=2 "$here/ddp.py" >"$OUT/ddp.stdout" 2>"$OUT/ddp.stderr"
kill -INT $R; wait $R
grep -E "^python|dropped|calls over" "$OUT/rec.out"
python3 - "$OUT/ddp.json" <<'PY'
import collections, json, sys
t = json.load(open(sys.argv[1]))
names = {e["pid"]: e["args"]["name"] for e in t["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"}
ops = collections.Counter((e["pid"] % 10_000_000, e["args"].get("device")) for e in t["traceEvents"]
                          if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset", "nccl"))
print("GPU ops by (pid, device):", dict(sorted(ops.items(), key=str)))
print("tracks:", sorted(v for k, v in names.items() if k >= 1_000_000_000))
PY
