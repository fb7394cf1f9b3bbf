#!/usr/bin/env bash
# On a GPU machine: provoke two verdicts and check cudatap names them: an
# input/host-bound job (tiny GPU work, busy CPU) and an idle holder (device
# memory, no CUDA calls). Usage: verdicts.sh BIN
set -u
BIN=$(realpath "$1")
export PYTHONUNBUFFERED=1
python3 - >/tmp/holder.out 2>&1 <<'PY' &
import torch, time
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(60)
PY
H=$!
python3 - >/tmp/host.out 2>&1 <<'PY' &
import torch, time
x = torch.randn(64, device="cuda")
print("ready", flush=True)
end = time.time() + 60
while time.time() < end:
    x = x * 1.0001          # a tiny kernel
    s = 0
    for i in range(20000):  # the host is the bottleneck
        s += i * i
    x.sum().item()
PY
B=$!
while ! grep -q ready /tmp/holder.out || ! grep -q ready /tmp/host.out; do sleep 0.2; done
"$BIN" record -p $H,$B -d 6s 2>&1 | sed -n '/GPUs (NVML)/,$p'
kill $H $B
