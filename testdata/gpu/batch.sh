#!/usr/bin/env bash
# Runs several H200 checks in one device call, each under its own time
# limit, and packs what they wrote into two files (the device returns only
# a few): OUTDIR/SUMMARY.txt, every check's own output, and OUTDIR/all.tgz,
# their output directories without the large traces (< 20 MB).
# Usage: batch.sh BIN OUTDIR NAME:SECONDS[:ENV=VAL,...] ...
#   e.g. batch.sh .devbin/cudatap $OUT issue24_check:150 graphs:80 race:70
# NAME runs testdata/gpu/NAME.sh BIN OUTDIR/NAME.
set -u
BIN=$1 OUT=$(realpath -m "$2"); shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT/work"
exec > >(tee "$OUT/SUMMARY.txt") 2>&1
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader 2>/dev/null
"$BIN" version 2>/dev/null | head -1
for spec in "$@"; do
	IFS=: read -r name secs envs <<<"$spec"
	echo; echo "################ $name (limit ${secs}s, at $((SECONDS - T0)) s)"
	(
		IFS=, read -ra kv <<<"${envs:-}"
		for e in "${kv[@]}"; do [ -n "$e" ] && export "$e"; done
		timeout --kill-after=5 "$secs" bash "$here/$name.sh" "$BIN" "$OUT/work/$name"
		echo "################ $name exit $? (at $((SECONDS - T0)) s)"
	)
	pkill -f "$OUT/work/$name" 2>/dev/null # what a check cut short left running (its paths are in its arguments)
done
cd "$OUT/work" && find . -type f -size -4M ! -name '*.cudatap' ! -name '*.json.gz' ! -name '*.perfetto-trace' -print0 |
	tar --null -czf "$OUT/all.tgz" -T - && ls -la "$OUT/all.tgz"
echo "done in $((SECONDS - T0)) s"
