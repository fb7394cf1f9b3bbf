#!/usr/bin/env bash
# gpu-check.sh's comparisons with the processes found by `record --all`
# (shared probes: one link set per library file, the hook rule applied in
# BPF) instead of launched: hidden syncs of sync_patterns.py and launch
# counts against PyTorch's profiler. Usage: allcheck.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
# all NAME OUTPUTS... -- CMD: record --all around one run of CMD.
all() {
	name=$1; shift
	outs=(); while [ "$1" != -- ]; do outs+=(-o "$1"); shift; done; shift
	"$BIN" record --all --nvml-interval=-1s "${outs[@]}" >"$OUT/$name.rec.out" 2>"$OUT/$name.rec.err" &
	rec=$!
	until grep -q "attached to" "$OUT/$name.rec.err" 2>/dev/null; do sleep 0.1; done
	"$@" >"$OUT/$name.stdout" 2>"$OUT/$name.stderr"
	kill -INT $rec; wait $rec
	grep -E "dropped|calls over" "$OUT/$name.rec.out" | tail -2
}
echo "== sync_patterns.py under --all"
all sync "$OUT/sync.cudatap" "$OUT/sync.json.gz" -- python3 "$here/sync_patterns.py" --iters 3
"$BIN" syncs --json "$OUT/sync.cudatap" >"$OUT/syncs.json"
for mode in eager triton; do
	echo "== launches under --all: $mode"
	all launch_$mode "$OUT/launch_$mode.json.gz" -- python3 "$here/launch_counts.py" $mode
done
python3 "$here/compare.py" "$OUT"
