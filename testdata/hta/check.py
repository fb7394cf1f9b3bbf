"""Runs HolisticTraceAnalysis's analyses on one trace, as a Kineto trace of
rank 0, and fails when one raises or finds nothing where a profiler trace of
a comparable run finds something. Prints one line per analysis.

    python3 check.py TRACE.json [--comm] [--bounded] [--steps N]

--comm: the trace has collectives (checks the comm/compute overlap too).
--bounded: no GPU op was measured (record --gpu-times=off): HTA must read
every kernel's duration as unknown (0, as Kineto writes one), none made up.
--steps N: the program ran N training steps, which the trace marks as
ProfilerStep#1..N (export/steps): HTA's per-step analyses must find them
all (read with include_last_profiler_step, as HTA by default leaves the
last step out, Kineto's being cut short), each with host calls and GPU
kernels, and the critical path of a step."""
import contextlib
import io
import logging
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.disable(logging.WARNING)

from hta.trace_analysis import TraceAnalysis  # noqa: E402

trace, comm, bounded = sys.argv[1], "--comm" in sys.argv[2:], "--bounded" in sys.argv[2:]
steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 0
work = tempfile.mkdtemp()
shutil.copy(trace, os.path.join(work, "rank-0.json.gz" if trace.endswith(".gz") else "rank-0.json"))
failed = []


def check(name, fn, ok):
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf):
            res = fn()
        why = ok(res)
    except Exception as e:  # an analysis that raises is what this catches
        why = f"raised {type(e).__name__}: {e}"
    print(f"{'FAIL' if why else 'ok  '} {name}{': ' + why if why else ''}")
    if why:
        failed.append(name)


def nonempty(df):
    return None if df is not None and len(df) > 0 else "empty"


def rounding(path):
    """Slices HTA's rounding (start up, end down to whole µs) turns negative."""
    import gzip
    import json
    import math
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        events = json.load(f)["traceEvents"]
    bad = [e["name"] for e in events if e.get("ph") == "X" and math.ceil(e["ts"]) > math.floor(e["ts"] + e["dur"])]
    return f"{len(bad)} slices round to a negative duration, e.g. {bad[:3]}" if bad else None


check("no negative durations after rounding", lambda: trace, rounding)
ta = TraceAnalysis(trace_dir=work)
host_api = ("cuda", "cu", "sync:", "cudatap")


def temporal(df):
    r = df.iloc[0]
    if r["kernel_time(us)"] <= 0:
        return f"no kernel time: {r.to_dict()}"
    if not 0 <= r["idle_time_pctg"] <= 100 or not 0 <= r["compute_time_pctg"] <= 100:
        return f"shares out of range: {r.to_dict()}"
    return None


def kernels(res):
    names = list(res[1]["name"])
    host = [n for n in names if n.startswith(host_api) and not n.startswith(("cutlass", "cub"))]
    if host:
        return f"host calls counted as GPU kernels: {host}"
    if (res[1]["min (us)"] < 0).any():
        return f"negative durations: {res[1][res[1]['min (us)'] < 0]['name'].tolist()}"
    if bounded and (res[1]["max (us)"] != 0).any():
        return f"made-up durations of ops nothing measured: {res[1][res[1]['max (us)'] != 0][['name', 'max (us)']].values.tolist()}"
    return nonempty(res[1])


def launches(res):
    df = res[0] if isinstance(res, dict) and 0 in res else next(iter(res.values()))
    if len(df) == 0:
        return "empty"
    if (df["cpu_duration"] < 0).any():
        return "negative launch durations"
    return None


def critical(res):
    graph, ok = res
    return None if ok and graph is not None else "no critical path"


check("temporal breakdown", lambda: ta.get_temporal_breakdown(visualize=False), temporal)
check("idle time breakdown", lambda: ta.get_idle_time_breakdown(ranks=[0], visualize=False)[0], nonempty)
check("GPU kernel breakdown", lambda: ta.get_gpu_kernel_breakdown(visualize=False), kernels)
check("queue length summary", lambda: ta.get_queue_length_summary(ranks=[0]), nonempty)
check("queue length time series", lambda: ta.get_queue_length_time_series(ranks=[0])[0], nonempty)
check("kernel launch stats", lambda: ta.get_cuda_kernel_launch_stats(ranks=[0], visualize=False), launches)
check("memory bandwidth", lambda: ta.get_memory_bw_summary(ranks=[0]), lambda r: None)
check("critical path", lambda: ta.critical_path_analysis(rank=0, annotation="", instance_id=None), critical)
if comm:
    def overlap(df):
        pct = df["comp_comm_overlap_pctg"].iloc[0]
        if bounded and pct != pct:  # NaN: no communication time known, nothing to overlap
            return None
        return None if 0 <= pct <= 100 else f"overlap {pct}%"
    check("comm/compute overlap", lambda: ta.get_comm_comp_overlap(visualize=False), overlap)
if steps:
    every = TraceAnalysis(trace_dir=work, include_last_profiler_step=True)
    want = list(range(1, steps + 1))

    def found(got):
        return None if [int(s) for s in got] == want else f"steps {got}, want {want}"

    def per_step(df):
        """Every step has host calls and the GPU kernels they launched (HTA
        assigns a kernel the step of its launch, by correlation)."""
        host = set(df[df["stream"] < 0]["iteration"].unique())
        gpu = set(df[df["stream"] > 0]["iteration"].unique())
        missing = [s for s in want if s not in host or s not in gpu]
        return f"steps without host calls or GPU work: {missing}" if missing else None

    def default_steps(got):  # HTA's default leaves the last step out
        return None if [int(s) for s in got] == want[:-1] else f"steps {got}, want {want[:-1]}"

    check("profiler steps", every.get_profiler_steps, found)
    check("profiler steps (last left out, HTA's default)", ta.get_profiler_steps, default_steps)
    check("events by step", lambda: every.t.get_trace(0), per_step)
    check("critical path of a step", lambda: every.critical_path_analysis(rank=0, annotation="ProfilerStep", instance_id=min(2, steps - 1)), critical)
shutil.rmtree(work, ignore_errors=True)
sys.exit(1 if failed else 0)
