#!/usr/bin/env bash
# On the H200: the flight recorder (issue 25 items 2 and 3). cudatap agent
# --flight-recorder 30s runs while
#   1. oom.py recover runs out of device memory at a known line (200 GiB
#      asked; 40, 30 and 30 x 1 GiB held at three lines), then recovers:
#      exactly one dump of it, trigger oom, whose JSON record has the size,
#      the line, the three holders and "recovered", and whose report leads
#      with the trigger;
#   2. flight_jobs.py killed is killed by SIGKILL after 50 steps: exactly
#      one dump of it, trigger signal ("killed by SIGKILL"), holding its
#      calls;
#   3. flight_jobs.py loop (a GPT-2-small-like model, batch 1: launch-bound)
#      trains for 55 s while the agent is stopped and started again around
#      it: its step time with the recorder on and off, interleaved (on, off,
#      on, off; the first second after each switch left out), the agent's
#      RSS while on, and a dump asked with cudatap dump PID.
# No network; about 2 minutes. Prints VERDICT lines; exit 1 if a dump check
# fails (the step times are numbers to read, not checked).
# Usage: flight.sh BIN OUTDIR   (BIN: cudatap built with cgo, for NVML)
# The soak of issue 25 item 3 (a long job, the agent's RSS over minutes):
#   FLIGHT_PARTS=3 FLIGHT_PHASES="off:40 on:200 off:40 on:200 off:40" flight.sh BIN OUTDIR
# runs part 3 alone through those phases (the recorder off or on for so
# many seconds; the job runs for their sum) and prints the agent's RSS per
# 20 s of each on phase; with CUDATAP_AGENT_PPROF=1, the agent's heap
# profile at the end of each on phase (OUTDIR/heap-*.pb.gz).
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); mkdir -p "$OUT"; rm -rf "$OUT/dumps"
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1
ADDR=127.0.0.1:19401
fail=0
AGENT=
now() { date +%s.%N; }
agent_start() {
	"$BIN" agent --flight-recorder 30s --dumps-dir "$OUT/dumps" --listen $ADDR --kubelet-socket "" >>"$OUT/agent.log" 2>&1 &
	AGENT=$!
	for _ in $(seq 300); do
		curl -sf $ADDR/healthz >/dev/null 2>&1 && return 0
		kill -0 $AGENT 2>/dev/null || { echo "the agent died:"; tail -5 "$OUT/agent.log"; exit 1; }
		sleep 0.1
	done
	echo "the agent was not ready in 30 s"; exit 1
}
agent_stop() { kill -TERM $AGENT; wait $AGENT; AGENT=; }
trap '[ -n "$AGENT" ] && kill -TERM $AGENT' EXIT
# dumps_of PID: the dumps of that process (their names end -TRIGGER-pidPID).
dumps_of() { ls "$OUT/dumps" 2>/dev/null | grep -E -- "-pid$1\.cudatap$"; }
# wait_dump PID TRIGGER: until that dump is written (30 s at most).
wait_dump() {
	for _ in $(seq 300); do
		dumps_of "$1" | grep -q -- "-$2-pid$1\.cudatap$" && { sleep 0.5; return 0; } # its report comes right after
		sleep 0.1
	done
	return 1
}

PARTS=${FLIGHT_PARTS:-123}
PHASES=${FLIGHT_PHASES:-on:8 dump off:8 on:8 off:8}
[[ $PARTS == *1* || $PARTS == *2* ]] && agent_start
if [[ $PARTS == *1* ]]; then
echo "=================== 1. out of memory (oom.py recover)"
timeout 150 python3 "$here/oom.py" recover "$OUT/oom.job.json" >"$OUT/oom.stdout" 2>"$OUT/oom.stderr"
echo "oom.py exit $? (0: recovered)"
PID=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pid'])" "$OUT/oom.job.json")
wait_dump "$PID" oom || echo "no oom dump of $PID within 30 s"
dumps_of "$PID" | sed 's/^/dump: /'
D=$(dumps_of "$PID" | grep -- "-oom-" | head -1)
if [ -n "$D" ]; then
	"$BIN" report "$OUT/dumps/$D" >"$OUT/oom.report" 2>&1
	"$BIN" export --json "$OUT/dumps/$D" >"$OUT/oom.summary.json" 2>"$OUT/oom.export.err"
fi
head -3 "$OUT/oom.report" 2>/dev/null | cut -c1-300
python3 - "$OUT" "$PID" "$D" <<'PY' || fail=1
import json, os, sys
out, pid, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
GiB = 1 << 30
problems = []
def check(ok, what):
    if not ok:
        problems.append(what)
dumps = [n for n in os.listdir(os.path.join(out, "dumps")) if n.endswith(f"-pid{pid}.cudatap")]
check(len(dumps) == 1 and "-oom-" in dumps[0], f"dumps of the job {dumps}, want exactly one, oom")
if d:
    job = json.load(open(os.path.join(out, "oom.job.json")))
    lines = job["lines"]
    s = json.load(open(os.path.join(out, "oom.summary.json")))
    report = open(os.path.join(out, "oom.report")).read()
    check(report.startswith("flight recorder, trigger oom: "), "the report does not lead with the trigger")
    recs = [r for r in s["ooms"] if r["pid"] == pid]
    check(len(recs) == 1, f"{len(recs)} out-of-memory records, want 1")
    def line_of(site):
        loc = site.rsplit(" ", 1)[0]
        return int(loc.rsplit(":", 1)[1]) if os.path.basename(loc.rsplit(":", 1)[0]) == "oom.py" else None
    if recs:
        r = recs[0]
        print(f"record: {r['call']} of {r['bytes'] / GiB:.1f} GiB at {r['site']}; held {r['held_bytes'] / GiB:.2f} GiB; recovered {r['recovered']}")
        check(r["bytes"] == 200 * GiB, f"asked {r['bytes']}, want 200 GiB")
        check(line_of(r["site"]) == lines["ask"], f"site {r['site']!r}, want oom.py:{lines['ask']}")
        want = sorted([(lines["hold-a"], 40 * GiB), (lines["hold-b"], 30 * GiB), (lines["hold-c"], 30 * GiB)])
        got = sorted((line_of(h.get("site", "")), h["bytes"]) for h in r["holders"][:3])
        check(got == want, f"holders {got}, want {want} (allocations made before the window are restated in the dump)")
        check(r["recovered"], "not recovered, though the job allocated again")
print("VERDICT oom: OK" if not problems else "VERDICT oom: FAIL: " + "; ".join(problems))
sys.exit(1 if problems else 0)
PY

fi
if [[ $PARTS == *2* ]]; then
echo "=================== 2. killed by a signal (flight_jobs.py killed)"
rm -f "$OUT/killed.json"
python3 "$here/flight_jobs.py" killed "$OUT/killed.json" >"$OUT/killed.stdout" 2>"$OUT/killed.stderr" &
J=$!
for _ in $(seq 600); do [ -s "$OUT/killed.json" ] && break; sleep 0.1; done
sleep 1 # what the job's last calls left in the ring buffer is read
kill -KILL $J; wait $J 2>/dev/null
wait_dump "$J" signal || echo "no signal dump of $J within 30 s"
dumps_of "$J" | sed 's/^/dump: /'
D=$(dumps_of "$J" | grep -- "-signal-" | head -1)
if [ -n "$D" ]; then
	"$BIN" report "$OUT/dumps/$D" >"$OUT/killed.report" 2>&1
	"$BIN" export --json "$OUT/dumps/$D" >"$OUT/killed.summary.json" 2>"$OUT/killed.export.err"
fi
head -2 "$OUT/killed.report" 2>/dev/null | cut -c1-300
python3 - "$OUT" "$J" "$D" <<'PY' || fail=1
import json, os, sys
out, pid, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
problems = []
dumps = [n for n in os.listdir(os.path.join(out, "dumps")) if n.endswith(f"-pid{pid}.cudatap")]
if not (len(dumps) == 1 and "-signal-" in dumps[0]):
    problems.append(f"dumps of the job {dumps}, want exactly one, signal")
if d:
    report = open(os.path.join(out, "killed.report")).read()
    if not report.startswith(f"flight recorder, trigger signal: process {pid} was killed by SIGKILL"):
        problems.append("the report does not lead with the trigger")
    s = json.load(open(os.path.join(out, "killed.summary.json")))
    procs = [p for p in s["processes"] if p["pid"] == pid]
    launches = sum(st["launches"] for p in procs for st in p["streams"])
    print(f"the dump holds {sum(p['calls'] for p in procs)} calls of the job, {launches} launches (50 steps: at least 100)")
    if launches < 100:
        problems.append(f"{launches} launches in the dump, want at least the 100 of its 50 steps")
print("VERDICT signal: OK" if not problems else "VERDICT signal: FAIL: " + "; ".join(problems))
sys.exit(1 if problems else 0)
PY

fi
if [[ $PARTS == *3* ]]; then
secs=0; for p in $PHASES; do [ "$p" = dump ] || secs=$((secs + ${p#*:})); done
echo "=================== 3. step time with and without the recorder (flight_jobs.py loop, phases: $PHASES)"
rm -f "$OUT/loop.json" "$OUT/phases" "$OUT/rss"
# The job: the phases and the time its start takes (torch imported, the
# model built, its first steps made).
python3 "$here/flight_jobs.py" loop "$OUT/loop.json" $((secs + 15)) >"$OUT/loop.stdout" 2>"$OUT/loop.stderr" &
L=$!
sleep 12
rss() { echo "$(now) $(awk '/VmRSS/ {print $2}' /proc/$AGENT/status)" >>"$OUT/rss"; }
phase() { # phase NAME SECONDS: the current state for that long
	echo "$1 $(now)" >>"$OUT/phases"
	for _ in $(seq "$2"); do sleep 1; [ -n "$AGENT" ] && rss; done
	echo "end $(now)" >>"$OUT/phases"
}
for p in $PHASES; do
	case $p in
	dump)
		"$BIN" dump --agent $ADDR $L >"$OUT/loop.dump" 2>"$OUT/loop.dump.err"
		echo "cudatap dump $L: exit $?"; cat "$OUT/loop.dump" "$OUT/loop.dump.err" | cut -c1-300 ;;
	on:*)
		[ -n "$AGENT" ] || agent_start
		phase on "${p#on:}"
		# With CUDATAP_AGENT_PPROF=1 the agent serves its heap: where its
		# memory is at the end of each on phase (go tool pprof -top).
		[ "${CUDATAP_AGENT_PPROF:-}" = 1 ] && curl -sf -o "$OUT/heap-$(date +%s).pb.gz" "$ADDR/debug/pprof/heap"
		# and its largest mappings by RSS (the heap, the ring buffer, files)
		awk '/^[0-9a-f]+-[0-9a-f]+ / {m = $6 ? $6 : "[anon " $1 "]"} /^Rss:/ {r[m] += $2} END {for (k in r) print r[k], k}' \
			/proc/$AGENT/smaps | sort -rn | head -8 | sed "s/^/agent mapping RSS (KiB) at the end of the phase: /" ;;
	off:*) [ -n "$AGENT" ] && agent_stop; phase off "${p#off:}" ;;
	esac
done
[ -n "$AGENT" ] && agent_stop
wait $L
P=$(head -1 "$OUT/loop.dump" 2>/dev/null | cut -d' ' -f1)
[ -n "$P" ] && "$BIN" report "$P" 2>/dev/null | head -2 | cut -c1-300
python3 - "$OUT" "$L" <<'PY'
import json, os, statistics, sys
out, pid = sys.argv[1], int(sys.argv[2])
ends = json.load(open(os.path.join(out, "loop.json")))["ends"]
steps = [(b, b - a) for a, b in zip(ends, ends[1:])]
phases, name, start = [], None, None
for line in open(os.path.join(out, "phases")):
    what, t = line.split()
    if what == "end":
        phases.append((name, start + 1, float(t)))  # the first second after a switch left out
    else:
        name, start = what, float(t)
by = {"on": [], "off": []}
for name, a, b in phases:
    d = [s for t, s in steps if a <= t - s and t <= b]
    if d:
        by[name] += d
        print(f"{name:3}: {len(d):4} steps, median {statistics.median(d) * 1e3:.2f} ms")
if by["on"] and by["off"]:
    on, off = statistics.median(by["on"]), statistics.median(by["off"])
    print(f"step time: recorder on {on * 1e3:.2f} ms, off {off * 1e3:.2f} ms: {100 * (on / off - 1):+.1f}% ({len(by['on'])} and {len(by['off'])} steps)")
samples = [l.split() for l in open(os.path.join(out, "rss"))] if os.path.exists(os.path.join(out, "rss")) else []
rss = [int(r) for _, r in samples]
if rss:
    print(f"agent RSS while on: {min(rss) / 1024:.0f}-{max(rss) / 1024:.0f} MiB over {len(rss)} samples")
    # Per 20 s of each on phase: flat once the recorder's window is full.
    for name, a, b in phases:
        if name != "on":
            continue
        row = []
        for lo in range(int(a), int(b), 20):
            r = [int(v) for t, v in samples if lo <= float(t) < lo + 20]
            if r:
                row.append(f"{max(r) / 1024:.0f}")
        print(f"agent RSS per 20 s of the phase at +{a - phases[0][1] + 1:.0f} s (max MiB): " + " ".join(row))
auto = [n for n in os.listdir(os.path.join(out, "dumps")) if n.endswith(f"-pid{pid}.cudatap") and "-on_demand-" not in n]
print("automatic dumps of the loop (want none):", auto or "none")
PY
grep -E "level=(WARN|ERROR)" "$OUT/agent.log" | sort | uniq -c | head -5
fi
exit $fail
