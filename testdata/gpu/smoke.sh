#!/usr/bin/env bash
# Quick reality check on a GPU machine: doctor, attach to a running PyTorch
# process, launch mode on the sync patterns. Usage: smoke.sh BIN OUTDIR
set -u
BIN=$1; OUT=$2; mkdir -p "$OUT"
here=$(dirname "$0")
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
python3 -c "import torch,sys; print(torch.__version__, torch.version.cuda, sys.version)"
python3 - <<'PY'
import site, glob
for s in site.getsitepackages():
    for f in glob.glob(s + "/nvidia/*/lib/libcudart*") + glob.glob(s + "/nvidia/*/lib/libnccl*"):
        print(f)
PY
ls /usr/include/python3.12/internal 2>/dev/null | head -3; python3-config --includes 2>/dev/null
$BIN doctor
echo "== attach to a running eager loop"
cat > /tmp/loop.py <<'PY'
import torch, time, sys
x = torch.randn(1024, 1024, device="cuda")
print("ready", flush=True)
t_end = time.time() + float(sys.argv[1])
while time.time() < t_end:
    for _ in range(50):
        x = torch.relu(x @ x) * 0.01
    v = x.sum().item()
PY
python3 /tmp/loop.py 12 > /tmp/loop.out &
LP=$!
while ! grep -q ready /tmp/loop.out 2>/dev/null; do sleep 0.2; done
$BIN doctor -p $LP
timeout 60 $BIN record -p $LP -d 4s -o "$OUT/attach.json.gz" -o "$OUT/attach.cudatap" -v 2>&1 | tail -40
$BIN syncs "$OUT/attach.cudatap" --top 5 2>&1 | head -40
wait $LP
echo "== launch mode: sync patterns"
timeout 240 $BIN record -o "$OUT/sync.cudatap" -- python3 $here/sync_patterns.py --iters 2 > "$OUT/sync.stdout" 2> "$OUT/sync.stderr"
echo "exit $?"; tail -5 "$OUT/sync.stderr"; tail -3 "$OUT/sync.stdout"
$BIN syncs "$OUT/sync.cudatap" --top 15 2>&1 | head -80
