"""Counts what cudatap saw of CUDA graph capture in a Chrome trace: captured
host calls (recorded into a graph, not executed) and graph launches with the
number of operations they replay. Usage: capture_check.py TRACE.json.gz"""
import collections
import gzip
import json
import sys

ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
captured = collections.Counter(e["name"] for e in ev if e.get("ph") == "X" and e.get("args", {}).get("captured"))
graphs = collections.Counter(e["name"] for e in ev if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"].startswith("Graph launch"))
capture_calls = collections.Counter(e["name"] for e in ev if e.get("ph") == "X" and "Capture" in e.get("name", "") or "GraphInstantiate" in e.get("name", ""))
print("capture calls:", dict(capture_calls))
print("captured host calls:", dict(captured))
print("graph launches on the GPU tracks:", dict(graphs))
sys.exit(0 if captured and graphs else 1)
