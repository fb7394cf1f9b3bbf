#!/usr/bin/env bash
# On the 2×H200 machine. (1) Stragglers across separate recordings: each
# DDP rank launched under its own `cudatap record` (as on two nodes), rank 1
# 20 ms late before every backward; `cudatap merge` puts them on one
# timeline and names the late rank with its Python line. (2) A hang: rank 1
# stops arriving after 10 steps while `cudatap record --all` watches; its
# stderr names rank 1 while rank 0 waits.
# Usage: ddp_straggler.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
cat >"$OUT/rank.sh" <<SH
#!/bin/sh
exec "$BIN" record -o "$OUT/rank\$LOCAL_RANK.cudatap" -- python3 "$here/ddp_straggler.py"
SH
chmod +x "$OUT/rank.sh"
echo "== (1) per-rank recordings, rank 1 sleeping 20 ms before each backward"
STEPS=40 SLOW_RANK=1 SLOW_MS=20 torchrun --nproc_per_node=2 --no-python "$OUT/rank.sh" >"$OUT/straggler.stdout" 2>"$OUT/straggler.stderr"
echo "torchrun exit $?"; tail -3 "$OUT/straggler.stdout"
"$BIN" merge "$OUT/rank0.cudatap" "$OUT/rank1.cudatap" -o "$OUT/job.json.gz" >"$OUT/merge.stdout" 2>"$OUT/merge.stderr"
echo "merge exit $?"
cat "$OUT/merge.stderr"
sed -n '/stragglers\|straggler/,$p' "$OUT/merge.stdout" | head -40
echo "== the same job, no slow rank (baseline)"
STEPS=40 torchrun --nproc_per_node=2 --no-python "$OUT/rank.sh" >"$OUT/base.stdout" 2>"$OUT/base.stderr"
"$BIN" merge "$OUT/rank0.cudatap" "$OUT/rank1.cudatap" -o "$OUT/base.json.gz" >"$OUT/base-merge.stdout" 2>"$OUT/base-merge.stderr"
cat "$OUT/base-merge.stderr"; sed -n '/stragglers\|straggler/,$p' "$OUT/base-merge.stdout" | head -20
echo "== (2) rank 1 stops arriving after 10 steps; record --all watches"
"$BIN" record --all --nvml-interval=-1s -o "$OUT/hang.cudatap" >"$OUT/hang.out" 2>"$OUT/hang.err" &
R=$!
until grep -q "attached to" "$OUT/hang.err" 2>/dev/null; do sleep 0.1; done
STEPS=40 HANG_RANK=1 HANG_AFTER=10 HANG_S=25 torchrun --nproc_per_node=2 "$here/ddp_straggler.py" >"$OUT/hang.stdout" 2>"$OUT/hang.stderr" &
T=$!
for i in $(seq 1 300); do grep -q "NCCL hang" "$OUT/hang.err" && break; sleep 0.1; done
date +%T.%N; grep "NCCL" "$OUT/hang.err"
wait $T; echo "torchrun exit $?"
kill -INT $R; wait $R
grep "NCCL" "$OUT/hang.err" "$OUT/hang.out"
