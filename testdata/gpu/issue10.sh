#!/usr/bin/env bash
# Issue 10 on the H200, this build (NEW) against the one before the fixes
# (OLD): returns without their entry when attached to a running PyTorch
# training loop (#6, uprobe_multi and per-symbol), and Python lines of
# sync_patterns.py, whose module-level frame was unnamed (#5).
# Usage: issue10.sh NEW_BIN OLD_BIN OUTDIR [SECONDS]
set -u
new=$(realpath "$1"); old=$(realpath "$2"); out=$3; secs=${4:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
python3 "$here/train_loop.py" 100000000 >"$out/train.out" 2>&1 &
T=$!
while ! grep -q ready "$out/train.out" 2>/dev/null; do sleep 0.2; done
for bin in "$old" "$new"; do
	for mode in multi per-symbol; do
		flag=""; [ $mode = per-symbol ] && flag=--per-symbol-uprobes
		echo "== $bin $mode: record -p (train loop) -d ${secs}s"
		"$bin" record -v -p $T -d ${secs}s $flag --nvml-interval=-1s -o "$out/attach.pb.gz" 2>"$out/attach-$mode.err" | grep -E "dropped|calls over" | tail -2
		grep -E "returns without|entries replaced" "$out/attach-$mode.err" | sed 's/^time=[^ ]* //' | head -8
	done
done
kill $T
for bin in "$old" "$new"; do
	echo "== $bin: sync_patterns.py"
	"$bin" record -o "$out/sync.cudatap" -- python3 "$here/sync_patterns.py" --iters 3 >"$out/sync.stdout" 2>"$out/sync.stderr"
	"$bin" syncs "$out/sync.cudatap" >"$out/syncs.txt" 2>&1
	echo "unnamed python frames: $(grep -c 'python code 0x' "$out/syncs.txt")"
	grep -E "^#[0-9]|^    py" "$out/syncs.txt" | head -12
done
