#!/usr/bin/env bash
# On the H200 machine, second pass: the consumer alone (real records
# replayed, no producer), a flood with 14 producer threads, the probe cost
# over more rounds, and the PyTorch sync/launch checks with this build.
# Usage: pipeline2.sh DIR_WITH_cudatap_AND_tracer.test OUTDIR
set -u
bin=$(realpath "$1"); out=${2:-/tmp/cudatap-pipeline}; mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
echo "== consumer alone, one core"
timeout 120 "$bin/tracer.test" -test.run '^$' -test.bench 'BenchmarkConsumer' -test.benchtime 3s -test.cpu 1 2>&1 | grep -E "Benchmark|FAIL|panic"
echo "== flood, as fast as 14 threads go (7 M launches)"
CUDATAP_FLOOD_THREADS=14 CUDATAP_FLOOD_LAUNCHES=500000 timeout 150 "$bin/tracer.test" -test.run '^$' -test.bench 'BenchmarkFlood$' -test.benchtime 2x 2>&1 | grep -E "Benchmark|FAIL|panic"
echo "== probe cost per launch, PyTorch x.add_(1) × 20000, 15 rounds"
CUDATAP_PROBECOST_ROUNDS=15 CUDATAP_PROBECOST_SCRIPT="$here/probecost.py" timeout 200 "$bin/tracer.test" -test.run '^$' -test.bench TorchProbeCost -test.benchtime 1x -test.v 2>&1 | grep -vE "^(goos|goarch|pkg|cpu):"
echo "== PyTorch checks"
MODES="eager triton" timeout 240 "$here/gpu-check.sh" "$bin/cudatap" "$out/check" 2>&1 | tail -60
