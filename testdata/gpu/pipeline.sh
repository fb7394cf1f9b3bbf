#!/usr/bin/env bash
# On the H200 machine: the pipeline's throughput under a launch flood
# (8 threads on the simulated runtime, default 16 MiB ring), the per-launch
# probe cost on a PyTorch loop, and the sync/launch checks, with binaries
# built elsewhere (cgo on). Usage: pipeline.sh DIR_WITH_cudatap_AND_tracer.test OUTDIR
set -u
bin=$(realpath "$1"); out=${2:-/tmp/cudatap-pipeline}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
nproc; uname -r
echo "== flood, as fast as 8 threads go (4 M launches)"
CUDATAP_FLOOD_THREADS=8 CUDATAP_FLOOD_LAUNCHES=500000 timeout 200 "$bin/tracer.test" -test.run '^$' -test.bench 'BenchmarkFlood$' -test.benchtime 3x 2>&1 | grep -E "Benchmark|FAIL|panic"
for rate in 250000 375000; do
	echo "== flood, 8 threads × $rate launches/s"
	CUDATAP_FLOOD_THREADS=8 CUDATAP_FLOOD_LAUNCHES=$((rate * 4)) CUDATAP_FLOOD_RATE=$rate timeout 200 "$bin/tracer.test" -test.run '^$' -test.bench 'BenchmarkFlood$' -test.benchtime 3x 2>&1 | grep -E "Benchmark|FAIL|panic"
done
echo "== probe cost per launch, PyTorch x.add_(1) × 20000"
CUDATAP_PROBECOST_SCRIPT="$here/probecost.py" timeout 300 "$bin/tracer.test" -test.run '^$' -test.bench TorchProbeCost -test.benchtime 1x -test.v 2>&1 | grep -vE "^(goos|goarch|pkg|cpu):"
