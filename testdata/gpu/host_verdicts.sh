#!/usr/bin/env bash
# On a GPU machine: the host side of the summary (issue 14) on real PyTorch
# runs: sync sites at the user's line, NCCL's watchdog as a background
# poller, host-bound and input-stall verdicts. Usage: host_verdicts.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=${2:-/tmp/host-verdicts}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
for mode in ${MODES-launch sync nccl stall}; do
	echo "=================== $mode"
	timeout 200 "$BIN" record -o "$OUT/$mode.cudatap" -- python3 "$here/host_verdicts.py" $mode >"$OUT/$mode.summary" 2>"$OUT/$mode.stderr"
	echo "record exit $?"; tail -3 "$OUT/$mode.stderr"
	"$BIN" syncs --top 8 "$OUT/$mode.cudatap" 2>&1 | head -60
	"$BIN" syncs --json "$OUT/$mode.cudatap" >"$OUT/$mode.syncs.json"
	sed -n '/^python3/,/^dropped/p' "$OUT/$mode.summary" | grep -v "^  stream [0-9]* (" | cut -c1-600
done
