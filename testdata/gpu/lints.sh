#!/usr/bin/env bash
# On a GPU machine: cudatap's lints (issue 14, item 2) on real PyTorch runs.
# Records each mode of lints.py, prints the summary's lint section and
# `cudatap lint`, and a verdict per mode: the lint expected fired, alone, at
# the lines of lints.py marked "# lint: ID" (clean: none fired).
# Usage: lints.sh BIN [OUTDIR]
set -u
BIN=$(realpath "$1"); OUT=${2:-/tmp/lints}; mkdir -p "$OUT"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
for mode in ${MODES-legacy race streams pageable sync clean}; do
	echo "=================== $mode"
	timeout 300 "$BIN" record -o "$OUT/$mode.cudatap" -- python3 "$here/lints.py" $mode >"$OUT/$mode.summary" 2>"$OUT/$mode.stderr"
	echo "record exit $?"; tail -2 "$OUT/$mode.stderr"
	echo "--- the summary's lint section"
	sed -n '/^lints: /,$p' "$OUT/$mode.summary" | cut -c1-400
	echo "--- cudatap lint"
	"$BIN" lint "$OUT/$mode.cudatap" | cut -c1-400
	"$BIN" lint --json "$OUT/$mode.cudatap" >"$OUT/$mode.lint.json"
	python3 - "$mode" "$OUT/$mode.lint.json" "$here/lints.py" <<'EOF'
import json, re, sys
mode, path, script = sys.argv[1:]
want = {"legacy": "legacy-nonblocking-copy", "race": "cross-stream-race", "streams": "many-busy-streams",
        "pageable": "pageable-copy-loop", "sync": "sync-every-launch", "clean": None}[mode]
# The lines a lint should name: "# lint: ID [role]" in lints.py.
lines = {}
for n, text in enumerate(open(script), 1):
    m = re.search(r"# lint: (\S+)(?: (\S+))?", text)
    if m:
        lines[(m.group(1), m.group(2))] = n
doc = json.load(open(path))
got = [f["id"] for f in doc["findings"]]
problems = []
if want is None:
    if got:
        problems.append(f"fired {got}, want none")
else:
    if got != [want]:
        problems.append(f"fired {got}, want [{want}]")
    for f in doc["findings"]:
        if f["id"] != want:
            continue
        calls = f["examples"][0]["calls"] if f["examples"] else []
        roles = {c["role"]: c for c in calls}
        for (lint, role), n in lines.items():
            if lint != want:
                continue
            if want == "many-busy-streams":
                continue  # launches carry no stack with --stacks sync
            c = roles.get(role) if role else (roles.get("sync") or roles.get("copy"))
            site = c["site"] if c else ""
            if f"lints.py:{n} " not in site + " ":
                problems.append(f"{lint} {role or ''}: site {site!r}, want lints.py:{n}")
        if want == "many-busy-streams" and f["count"] < 10:
            problems.append(f"only {f['count']} streams busy at once, want >= 10")
        print(f"{want}: {f['summary']}")
print(f"VERDICT {mode}: " + ("ok" if not problems else "FAIL: " + "; ".join(problems)))
EOF
done
