#!/usr/bin/env bash
# On the H200: `record --report` of report_train.py (an input-pipeline stall
# and a pageable copy), then `cudatap report` of its recording; the page,
# the recording and the terminal report come back under OUTDIR.
# Usage: report_check.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
"$BIN" record --gpu-times -o "$OUT/train.cudatap" --report "$OUT/report.html" -- python3 "$here/report_train.py" 40 >"$OUT/record.stdout" 2>"$OUT/record.stderr"
echo "record exit $?"; tail -3 "$OUT/record.stderr"
"$BIN" report "$OUT/train.cudatap" >"$OUT/report.txt" 2>&1
echo "report exit $?"
grep -n -i -E "verdict|input|pageable|host bound|stall" "$OUT/report.txt" | cut -c1-300 | head -30
ls -la "$OUT"
