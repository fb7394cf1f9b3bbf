#!/usr/bin/env bash
# On the H200: (1) the agent with --launch-times while a launch-bound
# PyTorch loop runs: every launch counted is timed (histogram count ==
# launches), and the times it keeps beside the loop's own time per
# iteration. (2) What the agent costs that loop: untraced, agent, agent
# --launch-times, interleaved over ROUNDS rounds (default 3).
# Usage: agent_times.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
agent() { # agent ARGS...: start it and wait until it serves
	"$BIN" agent --continuous --pid-label --listen 127.0.0.1:9400 "$@" >>"$OUT/agent.out" 2>&1 &
	A=$!
	until curl -sf 127.0.0.1:9400/healthz >/dev/null 2>&1; do sleep 0.2; done
	sleep 1 # attached: shared probes on the host's libraries
}
echo "== (1) --launch-times on python3 launch_times.py 20000"
agent --launch-times
python3 "$here/launch_times.py" 20000 >"$OUT/times.stdout"
sleep 2 # read once more (once a second)
curl -s 127.0.0.1:9400/metrics >"$OUT/metrics.txt"
kill -INT $A; wait $A
read -r pid n ns <"$OUT/times.stdout"
echo "loop: pid $pid, $n iterations, $ns ns per iteration (its own clock)"
grep "pid=\"$pid\"" "$OUT/metrics.txt" | grep -E '^cudatap_kernel_launches_total|cudatap_cuda_api_seconds_(bucket|count|sum).*api="cuLaunchKernel"'
grep -E '^cudatap_launch_times_lost_total|^cudatap_agent_dropped' "$OUT/metrics.txt"
echo "== (2) the loop's ns per iteration: untraced, agent, agent --launch-times"
for r in $(seq 1 "${ROUNDS:-3}"); do
	u=$(python3 "$here/launch_times.py" 20000 | cut -d' ' -f3)
	agent; a=$(python3 "$here/launch_times.py" 20000 | cut -d' ' -f3); kill -INT $A; wait $A
	agent --launch-times; t=$(python3 "$here/launch_times.py" 20000 | cut -d' ' -f3); kill -INT $A; wait $A
	echo "round $r: untraced $u, agent $a, agent --launch-times $t"
done
