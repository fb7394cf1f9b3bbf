#!/usr/bin/env bash
# On the H200: cudatap agent --continuous --every 5s while a PyTorch loop
# runs for ~15 s: /profile?pid= serves its profile while it runs (a cut
# every 5 s), and its launches are in /metrics; after it exits, two cuts
# later, it has been retired (the agent's heap follows the live
# processes) while its series stay for their grace.
# Usage: agent_continuous.sh BIN OUTDIR
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
"$BIN" agent --continuous --every 5s --pid-label --listen 127.0.0.1:9400 >"$OUT/agent.out" 2>&1 &
A=$!
until curl -sf 127.0.0.1:9400/healthz >/dev/null 2>&1; do sleep 0.2; done
python3 "$here/launch_times.py" 3000000 >"$OUT/loop.stdout" &
P=$!
sleep 12
echo "while it runs: /profile?pid=$P ->" $(curl -s -o "$OUT/profile-running.pb.gz" -w "%{http_code} %{size_download} bytes" "127.0.0.1:9400/profile?pid=$P")
curl -s 127.0.0.1:9400/metrics | grep "pid=\"$P\"" | grep -E "^cudatap_kernel_launches_total"
wait $P
echo "loop:" $(cat "$OUT/loop.stdout")
sleep 12 # two cuts
curl -s 127.0.0.1:9400/metrics >"$OUT/metrics-after.txt"
grep "pid=\"$P\"" "$OUT/metrics-after.txt" | grep -E "^cudatap_kernel_launches_total"
grep -E "^cudatap_agent_(process_resident_memory_bytes|dropped_events_total)" "$OUT/metrics-after.txt"
kill -INT $A; wait $A; echo "agent exit $?"
tail -3 "$OUT/agent.out"
