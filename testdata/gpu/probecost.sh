#!/usr/bin/env bash
# On the H200 machine: the per-launch probe cost with the PyTorch process
# pinned to CPU 2 and cudatap to CPUs 4-7 (less noise than unpinned), and
# when the naming window closes after attaching to a running PyTorch loop.
# Usage: probecost.sh DIR_WITH_cudatap_AND_tracer.test
set -u
bin=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
echo "== probe cost, pinned, ${ROUNDS:-15} rounds"
CUDATAP_PROBECOST_CPU=2 CUDATAP_PROBECOST_ROUNDS=${ROUNDS:-15} CUDATAP_PROBECOST_SCRIPT="$here/probecost.py" \
	timeout 240 taskset -c 4-7 "$bin/tracer.test" -test.run '^$' -test.bench TorchProbeCost -test.benchtime 1x -test.v 2>&1 | grep -vE "^(goos|goarch|pkg|cpu):"
echo "== naming window after attaching to a running loop"
python3 "$here/train_loop.py" 200000 >/tmp/loop.out 2>&1 &
loop=$!
while ! grep -q ready /tmp/loop.out 2>/dev/null; do sleep 0.2; done
CUDATAP_DEBUG=1 timeout 60 "$bin/cudatap" record -p $loop -d 3s --nvml-interval=-1s -o /tmp/w.pb.gz 2>&1 | grep -E "naming window|attached to|dropped events|level=WARN" | head
kill $loop
