#!/usr/bin/env bash
# On the H200: what GPU times cost per launch on the launch-bound x.add_(1)
# loop (issue 24 item 1), with less noise than issue24_check.sh's three
# rounds: ROUNDS rounds (default 6) of four runs each, their order rotated
# from round to round, every run pinned (the job to CPUs 4-7, cudatap to
# 8-11), 100,000 launches a run:
#   plain       the loop alone
#   cudatap     cudatap record --gpu-times=off
#   kernelonly  cudatap record, CUPTI's kernel/copy/memset records with no
#               join (CUDATAP_GPU_JOIN=none): the floor of any join
#   gputimes    cudatap record (GPU times on: the default join)
# Prints µs per launch per run and, per round, the differences to the same
# round's runs (paired), then their medians: what GPU times add over
# cudatap alone (aim ≤ 1.5 µs) and what the join adds over CUPTI's records.
# Usage: joincost.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(mkdir -p "$2" && realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
W="$here/issue24_workload.py"
ROUNDS=${ROUNDS:-6}
STEPS=${STEPS:-100}
T0=$SECONDS
"$BIN" version 2>/dev/null | head -1
L=(taskset -c 4-7 python3 "$W" --modes tiny --steps-tiny "$STEPS")
run() { # run ROUND HOW
	local o="$OUT/cost-$1-$2.out"
	local rec=(taskset -c 8-11 "$BIN" record -q --nvml-interval=-1s --stacks none -o "$OUT/cost.json.gz")
	case $2 in
	plain) timeout 60 "${L[@]}" >"$o" 2>&1 ;;
	cudatap) timeout 60 "${rec[@]}" --gpu-times=off -- "${L[@]}" >"$o" 2>&1 ;;
	kernelonly) CUDATAP_GPU_JOIN=none timeout 60 "${rec[@]}" -- "${L[@]}" >"$o" 2>&1 ;;
	gputimes) timeout 60 "${rec[@]}" -- "${L[@]}" >"$o" 2>&1 ;;
	esac
	echo "round $1 $2: exit $? (at $((SECONDS - T0)) s)"
}
hows=(plain cudatap kernelonly gputimes)
for r in $(seq "$ROUNDS"); do
	for i in 0 1 2 3; do
		run "$r" "${hows[$(((i + r) % 4))]}"
	done
done
rm -f "$OUT/cost.json.gz"
python3 - "$OUT" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
us = {}
for f in glob.glob(os.path.join(out, "cost-*.out")):
    r, how = os.path.basename(f)[5:-4].split("-", 1)
    for l in open(f):
        if l.startswith("{"):
            try:
                us[(int(r), how)] = json.loads(l)["us_per_launch"]
            except (ValueError, KeyError):
                pass
hows = ["plain", "cudatap", "kernelonly", "gputimes"]
rounds = sorted({r for r, _ in us})
print("round " + " ".join(f"{h:>11s}" for h in hows) + "   µs per launch")
for r in rounds:
    print(f"{r:5d} " + " ".join(f"{us[(r, h)]:11.3f}" if (r, h) in us else " " * 11 for h in hows))
def paired(a, b):
    d = [us[(r, a)] - us[(r, b)] for r in rounds if (r, a) in us and (r, b) in us]
    return d, (statistics.median(d) if d else float("nan"))
for a, b, what in [("cudatap", "plain", "cudatap over the loop alone"),
                   ("kernelonly", "cudatap", "CUPTI's records over cudatap alone"),
                   ("gputimes", "kernelonly", "the join over CUPTI's records"),
                   ("gputimes", "cudatap", "GPU times over cudatap alone (aim <= 1.5)")]:
    d, m = paired(a, b)
    print(f"{what:45s} median {m:+.2f} µs per launch, rounds: " + " ".join(f"{x:+.2f}" for x in d))
PY
echo "done in $((SECONDS - T0)) s"
