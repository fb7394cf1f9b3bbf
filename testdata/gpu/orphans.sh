cd testdata/gpu
python3 - >/tmp/host.out 2>&1 <<'PY' &
import torch, time
x = torch.randn(64, device="cuda")
print("ready", flush=True)
end = time.time() + 60
while time.time() < end:
    x = x * 1.0001
    x.sum().item()
    time.sleep(0.001)
PY
B=$!
while ! grep -q ready /tmp/host.out; do sleep 0.2; done
for w in 5s 0 5s 0; do echo "name-window $w"; ../../.devbin/cudatap record -p $B -d 4s --name-window $w --nvml-interval=-1s 2>&1 | grep -E "dropped|calls over"; done
kill $B
