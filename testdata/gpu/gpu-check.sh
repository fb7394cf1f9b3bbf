#!/usr/bin/env bash
# On a GPU machine: run the PyTorch checks under cudatap and compare with
# PyTorch's own tools. Usage: gpu-check.sh BIN [OUTDIR]
set -u
BIN=$(realpath "$1"); OUT=${2:-${OUT:-/tmp/cudatap-gpu-check}}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1

echo "== hidden synchronizations (torch sync debug mode vs cudatap)"
"$BIN" record -o "$OUT/sync.cudatap" -o "$OUT/sync.json.gz" -- python3 "$here/sync_patterns.py" --iters 3 >"$OUT/sync.stdout" 2>"$OUT/sync.stderr"
"$BIN" syncs --json "$OUT/sync.cudatap" >"$OUT/syncs.json"
"$BIN" syncs --top 12 "$OUT/sync.cudatap" | head -60

for mode in ${MODES-eager compile triton}; do
	echo "== launches: $mode"
	timeout 300 "$BIN" record --nvml-interval=-1s -o "$OUT/launch_$mode.json.gz" -- python3 "$here/launch_counts.py" $mode >"$OUT/launch_$mode.stdout" 2>"$OUT/launch_$mode.stderr" || tail -5 "$OUT/launch_$mode.stderr"
done

python3 "$here/compare.py" "$OUT"
