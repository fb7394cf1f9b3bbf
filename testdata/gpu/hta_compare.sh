#!/usr/bin/env bash
# On the H200: the same training window traced by PyTorch's profiler (CUPTI,
# a Kineto trace) and by cudatap attached with -p. Writes both traces to
# OUTDIR; compare them with testdata/hta/compare.py (no GPU needed).
# Usage: hta_compare.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
rm -f "$OUT/go"; mkfifo "$OUT/go"
python3 "$here/hta_compare.py" "$OUT/kineto.json" 30 <"$OUT/go" >"$OUT/py.out" 2>"$OUT/py.err" &
P=$!
exec 3>"$OUT/go"
while ! grep -q ready "$OUT/py.out" 2>/dev/null; do sleep 0.2; done
"$BIN" record -p $P --nvml-interval=-1s -o "$OUT/cudatap.json" -o "$OUT/cudatap.cudatap" >"$OUT/rec.out" 2>"$OUT/rec.err" &
R=$!
until grep -q "attached to" "$OUT/rec.err" 2>/dev/null; do sleep 0.1; done
echo go >&3; exec 3>&-
wait $P; wait $R
grep -E "dropped|calls over" "$OUT/rec.out"
cat "$OUT/py.out" | tail -1
ls -la "$OUT"/*.json
