#!/usr/bin/env bash
# Python lines of hidden syncs, this build against another (e.g. the last
# release), on sync_patterns.py. Usage: pycheck.sh NEW_BIN OLD_BIN OUTDIR
set -u
here=$(cd "$(dirname "$0")" && pwd)
for which in new old; do
	bin=$1; [ $which = old ] && bin=$2
	out=$3/$which; mkdir -p "$out"
	echo "== $which: $bin"
	CUDATAP_DEBUG=1 MODES="" timeout 200 "$here/gpu-check.sh" "$bin" "$out" >"$out/check.txt" 2>&1
	sed -n '/== synchronizations/,$p' "$out/check.txt"
	grep -c "python frame" "$out/sync.stderr"
	grep "python frame" "$out/sync.stderr" | sed 's/.*err=//' | sort | uniq -c | sort -rn | head -5
done
