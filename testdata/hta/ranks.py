"""Loads a directory of traces with HolisticTraceAnalysis and prints the
ranks it sees, sorted, as a JSON list: one entry per trace when each says
its rank as Kineto does (distributedInfo).

    python3 ranks.py DIR"""
import contextlib
import io
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
logging.disable(logging.WARNING)

from hta.trace_analysis import TraceAnalysis  # noqa: E402

with contextlib.redirect_stdout(io.StringIO()):
    ta = TraceAnalysis(trace_dir=sys.argv[1])
print(json.dumps(sorted(ta.t.traces.keys())))
