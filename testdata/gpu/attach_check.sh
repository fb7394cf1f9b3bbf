#!/usr/bin/env bash
# On the H200: attached to a running PyTorch process whose pinned buffer
# predates cudatap, copies from it must be pinned (issue 10 #7); and the
# launch counts against PyTorch's profiler with this build.
# Usage: attach_check.sh BIN_DIR
set -u
bin=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
python3 "$here/pinned_attach.py" 12 >/tmp/pa.out 2>&1 &
p=$!
while ! grep -q ready /tmp/pa.out 2>/dev/null; do sleep 0.2; done
"$bin/cudatap" record -p $p -d 4s --nvml-interval=-1s -o /tmp/pa.pb.gz 2>&1 | grep -E "attached|pinned host memory found|STREAM|stream|total|pageable_memcpy|dropped" | head -20
kill $p 2>/dev/null
echo "== launch counts vs the PyTorch profiler"
MODES="eager triton" timeout 200 "$here/gpu-check.sh" "$bin/cudatap" /tmp/gc 2>&1 | sed -n '/== launches in the profiled window/,$p'
