#!/usr/bin/env bash
# Records ~10 M launches of the simulated runtime (one flooding thread, a
# 1 GiB ring so none is lost), then times `cudatap export` of that
# recording to pprof, .json.gz, a Perfetto trace and plain JSON (counted
# on a pipe, not stored) and reports each one's size and peak RSS.
# Usage (root): testdata/bench/export10m.sh [path/to/cudatap] [launches]
set -euo pipefail
bin=$(realpath "${1:-bin/cudatap}")
n=${2:-10000000}
work=$(mktemp -d /var/tmp/cudatap-export-XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$work"
sim=$("$bin" demo --keep-build 2>&1 >/dev/null | sed -n 's/^building the simulated CUDA runtime and workload in //p')
trap 'rm -rf "$work" "$sim"' EXIT
echo go | /usr/bin/time -f "record: %e s, peak RSS %M KB" "$bin" record --ring-buffer-size 1073741824 --stacks none \
	--nvml-interval -1s -o big.cudatap -- "$sim/flood" 1 "$n" >/dev/null 2>record.log || { cat record.log; exit 1; }
grep -E "^record:|dropped events" record.log
ls -l big.cudatap | awk '{printf "recording: %.0f MB\n", $5/1e6}'
for out in profile.pb.gz trace.json.gz trace.perfetto-trace; do
	/usr/bin/time -f "export -o $out: %e s, peak RSS %M KB" "$bin" export big.cudatap -o "$out" >/dev/null 2>export.log || { cat export.log; exit 1; }
	grep "^export" export.log
	ls -l "$out" | awk '{printf "  %s: %.1f MB\n", $9, $5/1e6}'
	rm "$out"
done
/usr/bin/time -f "export -o - --format chrome | wc -c: %e s, peak RSS %M KB" "$bin" export -q big.cudatap -o - --format chrome 2>export.log | wc -c | awk '{printf "  trace.json: %.1f MB\n", $1/1e6}'
grep "^export" export.log
