#!/usr/bin/env bash
# On the H200 (issue 22): record follows the job.
#  (1) cudatap record -- torchrun --nproc_per_node=1 follow_train.py, and the
#      same through a bash script and python -m torch.distributed.run: the
#      worker is traced, its launch count equal to the PyTorch profiler's in
#      the same worker;
#  (2) a CUDA program whose first call is a launch: 240 launches = 240;
#  (3) a tree without CUDA: the summary says so;
#  (4) BenchmarkLaunchOverhead (tracer.test, if given): followed vs alone.
# Usage: follow.sh BIN OUTDIR [TRACER_TEST]
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"; TT=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
cd "$OUT"
check() { # check NAME: compare the worker's profiler count with cudatap's
	"$BIN" export --json "$OUT/$1.cudatap" >"$OUT/$1.json" 2>"$OUT/$1.export.err"
	python3 - "$OUT/$1.out" "$OUT/$1.json" "$1" <<'PY'
import json, sys
workers = [json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"pid"')]
s = json.load(open(sys.argv[2]))
procs = {p["pid"]: p for p in s["processes"]}
print(f"{sys.argv[3]}: {len(s['processes'])} processes:", ", ".join(f"{p['comm']}({p['pid']}<-{p.get('parent',0)}) calls={p['calls']}" for p in s["processes"]))
for w in workers:
    p = procs.get(w["pid"])
    got = sum(st["launches"] for st in p["streams"]) if p else None
    verdict = "OK" if got == w["profiler_launches"] else "MISMATCH"
    print(f"  worker pid {w['pid']} rank {w['rank']}: cudatap {got} launches, profiler {w['profiler_launches']}: {verdict}")
print("  lost events:", s["lost_events"], "drops:", {k: v for k, v in s["drops"].items() if v})
PY
}
echo "== (1) torchrun"
"$BIN" record --nvml-interval=-1s -o torchrun.cudatap -- torchrun --nproc_per_node=1 "$here/follow_train.py" >torchrun.out 2>torchrun.err
echo "record exit $?"; tail -3 torchrun.err; check torchrun
printf '#!/bin/bash\nset -e\ntorchrun --nproc_per_node=1 %s\n' "$here/follow_train.py" >train.sh
"$BIN" record --nvml-interval=-1s -o bash.cudatap -- bash train.sh >bash.out 2>bash.err
echo "record exit $?"; check bash
"$BIN" record --nvml-interval=-1s -o distrun.cudatap -- python3 -m torch.distributed.run --nproc_per_node=1 "$here/follow_train.py" >distrun.out 2>distrun.err
echo "record exit $?"; check distrun
echo "== (1b) --no-follow: the launcher only (the old behaviour)"
"$BIN" record --no-follow --nvml-interval=-1s -o nofollow.cudatap -- torchrun --nproc_per_node=1 "$here/follow_train.py" >nofollow.out 2>nofollow.err
echo "record exit $?"; check nofollow
echo "== (2) first call a launch"
nvcc -O2 -o first_launch "$here/first_launch.cu" 2>&1 | tail -2
for mode in "" --no-follow; do
	"$BIN" record $mode --nvml-interval=-1s --json -o first$mode.cudatap -- ./first_launch >first$mode.out 2>first$mode.err
	"$BIN" export --json first$mode.cudatap | python3 -c "import json,sys; s=json.load(sys.stdin); p=[p for p in s['processes'] if p['comm'].startswith('first')]; print('first call a launch $mode:', sum(st['launches'] for st in p[0]['streams']) if p else 'not traced', 'launches (want 240)')"
done
echo "== (3) no CUDA"
"$BIN" record --nvml-interval=-1s -o nocuda.cudatap -- bash -c 'ls / >/dev/null; python3 -c "print(1)"' 2>&1 | grep -E "^no CUDA|summary:" | cut -c1-160
if [ -n "$TT" ]; then
	echo "== (4) launch overhead, followed vs alone (tracer.test -test.bench LaunchOverhead)"
	CUDATAP_BENCH_ROUNDS=11 "$TT" -test.run '^$' -test.bench 'LaunchOverhead' -test.benchtime 1x 2>&1 | grep -E "Benchmark|ok|FAIL"
fi
