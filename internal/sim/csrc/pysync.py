#!/usr/bin/env python3
"""Drives the simulated libcudart from Python through ctypes, like a PyTorch
training step, so a tracer can be checked for naming the Python lines that
block on the GPU.

    pysync.py LIBCUDART [ITERS] [--wait-stdin] [--linger-ms MS] [--module-syncs]

Each CUDA call is made directly from the function whose line the tracer
should report (no Python wrapper frame in between). At the end it prints one
JSON line: {"pid": ..., "calls": {name: count}, "internal": {name: count},
"lines": {function: line}}, where internal counts the driver calls the
runtime made underneath and lines gives, for each function, the line of its
interesting call.

With --module-syncs it also syncs where code objects do not outlive the
call: a stream sync at module level ("module" in lines) and a device sync
from code compiled as compiled.py and freed right after it ran (line 2),
and then exits at once, so a tracer cannot read those code objects later.
"""
import ctypes
import inspect
import json
import os
import sys

D2H = 2
H2D = 1


class dim3(ctypes.Structure):
    """Passed by value: 12 bytes, two integer registers on x86-64."""
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


VP = ctypes.c_void_p
PROTOTYPES = {
    "cudaMalloc": [ctypes.POINTER(VP), ctypes.c_size_t],
    "cudaFree": [VP],
    "cudaMemcpyAsync": [VP, VP, ctypes.c_size_t, ctypes.c_int, VP],
    "cudaStreamSynchronize": [VP],
    "cudaLaunchKernel": [VP, dim3, dim3, ctypes.POINTER(VP), ctypes.c_size_t, VP],
    "cudaDeviceSynchronize": [],
}

LIB = None
CALLS = {}
DEV = VP()
ITEM = ctypes.create_string_buffer(4)  # pageable, like a Python scalar's home
BATCH = ctypes.create_string_buffer(1 << 20)  # pageable input batch
KERNEL = VP()  # any code address serves as a kernel "stub"


def ok(name, status):
    """Counts a call that was just made and checks its status."""
    CALLS[name] = CALLS.get(name, 0) + 1
    if status != 0:
        raise RuntimeError(f"{name} returned {status}")


def load(path):
    global LIB
    LIB = ctypes.CDLL(path)
    for name, argtypes in PROTOTYPES.items():
        fn = getattr(LIB, name)
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
    KERNEL.value = ctypes.cast(LIB.cudaGetLastError, VP).value
    ok("cudaMalloc", LIB.cudaMalloc(ctypes.byref(DEV), 1 << 20))


def step_item():
    """Like tensor.item(): a 4-byte D2H copy into pageable memory, then a sync."""
    ok("cudaMemcpyAsync", LIB.cudaMemcpyAsync(ctypes.addressof(ITEM), DEV, 4, D2H, None))
    ok("cudaStreamSynchronize", LIB.cudaStreamSynchronize(None))


def pageable_copy():
    """An async H2D copy from pageable memory: it blocks the host."""
    ok("cudaMemcpyAsync", LIB.cudaMemcpyAsync(DEV, ctypes.addressof(BATCH), len(BATCH), H2D, None))


def device_sync():
    """A 0.5 ms kernel (500 blocks of 1 us), then a device-wide sync."""
    ok("cudaLaunchKernel", LIB.cudaLaunchKernel(KERNEL, dim3(500, 1, 1), dim3(256, 1, 1), None, 0, None))
    ok("cudaDeviceSynchronize", LIB.cudaDeviceSynchronize())


def main():
    step_item()
    pageable_copy()
    device_sync()


def driver_internal():
    """The driver calls the runtime made underneath: libcuda's own counters
    (the script calls no driver function itself)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return {}
    calls = cuda.sim_driver_calls
    calls.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_ulong)]
    calls.restype = ctypes.c_char_p
    counts, n, i = {}, ctypes.c_ulong(), 0
    while True:
        name = calls(i, ctypes.byref(n))
        if name is None:
            return counts
        if n.value:
            counts[name.decode()] = n.value
        i += 1


def line_of(func, needle):
    """The line number of the first source line of func containing needle."""
    src, first = inspect.getsourcelines(func)
    for i, text in enumerate(src):
        if needle in text:
            return first + i
    raise LookupError(f"{needle!r} not in {func.__name__}")


if __name__ == "__main__":
    linger = 0
    argv = sys.argv[1:]
    if "--linger-ms" in argv:
        i = argv.index("--linger-ms")
        linger = int(argv[i + 1])
        del argv[i : i + 2]
    module_syncs = "--module-syncs" in argv
    args = [a for a in argv if a not in ("--wait-stdin", "--module-syncs")]
    if not 1 <= len(args) <= 2:
        sys.exit("usage: pysync.py LIBCUDART [ITERS] [--wait-stdin] [--linger-ms MS]")
    iters = int(args[1]) if len(args) == 2 else 20
    if "--wait-stdin" in sys.argv[1:]:
        print(f"ready {os.getpid()}", flush=True)
        if not sys.stdin.readline():
            sys.exit("pysync: stdin closed before the go-ahead line")
    load(os.path.abspath(args[0]))
    for _ in range(iters):
        main()
    if module_syncs:
        ok("cudaStreamSynchronize", LIB.cudaStreamSynchronize(None))  # module-level sync
        exec(compile("\nok('cudaDeviceSynchronize', LIB.cudaDeviceSynchronize())\n", "compiled.py", "exec"))
    ok("cudaFree", LIB.cudaFree(DEV))
    lines = {
        "step_item": line_of(step_item, "LIB.cudaStreamSynchronize("),
        "pageable_copy": line_of(pageable_copy, "LIB.cudaMemcpyAsync("),
        "device_sync": line_of(device_sync, "LIB.cudaDeviceSynchronize("),
    }
    if module_syncs:
        with open(__file__) as f:
            lines["module"] = 1 + next(i for i, t in enumerate(f) if t.rstrip().endswith("# module-level sync"))
        lines["compiled"] = 2
    report = {"pid": os.getpid(), "calls": CALLS, "internal": driver_internal(), "lines": lines}
    print(json.dumps(report, separators=(",", ":")), flush=True)
    # A tracer reads code objects while the process lives: stay a moment.
    if linger:
        import time
        time.sleep(linger / 1000)
