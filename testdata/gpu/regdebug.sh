#!/usr/bin/env bash
# Why kernels of a stripped PyTorch library stay unnamed in attach mode:
# the registration decoder's findings on libtorch_cuda.so.
set -u
BIN=$(realpath "$1"); OUT=$2; mkdir -p "$OUT"
lib=$(python3 -c "import torch, os; print(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cuda.so'))")
ls -la "$lib"
readelf -rW "$lib" | grep -i cudaRegisterFunction | head -3
readelf -SW "$lib" | grep -E " \.text| \.plt" | head
objdump -d -j .plt.sec "$lib" 2>/dev/null | grep -B1 -A3 "cudaRegisterFunction" | head -8
objdump -d -j .plt "$lib" 2>/dev/null | grep -B1 -A3 "cudaRegisterFunction" | head -8
# the first call sites
objdump -d --no-show-raw-insn "$lib" 2>/dev/null | grep -m3 -B12 "cudaRegisterFunction" > "$OUT/callsites.txt"; head -40 "$OUT/callsites.txt"
