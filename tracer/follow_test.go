package tracer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/probe"
)

// followRun launches command with Follow and returns the outcome and the
// reports of every workload the tree ran (one JSON line each on stdout).
func followRun(t *testing.T, command ...string) (*Outcome, []*sim.Report) {
	t.Helper()
	var stdout strings.Builder
	out, err := runTraced(context.Background(), Config{Command: command, Follow: true, Stacks: probe.StacksSync,
		Stdout: &stdout, Stderr: os.Stderr, NVMLInterval: -1, Duration: 2 * time.Minute})
	if err != nil {
		t.Fatalf("record %v: %v", command, err)
	}
	if out.ExitCode != 0 {
		t.Fatalf("%v exited %d; output:\n%s", command, out.ExitCode, stdout.String())
	}
	var reps []*sim.Report
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "{") {
			rep, err := sim.ParseReport([]byte(line))
			if err != nil {
				t.Fatal(err)
			}
			reps = append(reps, rep)
		}
	}
	return out, reps
}

// checkTree checks every workload's calls, exactly, each in its own
// process, started by parent (0: any); and that nothing was lost.
func checkTree(t *testing.T, out *Outcome, reps []*sim.Report, want int, parent func(rep *sim.Report) uint32) {
	t.Helper()
	if len(reps) != want {
		t.Fatalf("%d workload reports, want %d", len(reps), want)
	}
	for _, rep := range reps {
		p := tracedOf(t, out, rep.PID)
		if p == nil {
			t.Errorf("workload %d not traced", rep.PID)
			continue
		}
		checkCounts(t, out, rep)
		if parent != nil {
			if w := parent(rep); w != 0 && p.Info.Parent != w {
				t.Errorf("workload %d: parent %d, want %d", rep.PID, p.Info.Parent, w)
			}
		}
		if !strings.Contains(p.Info.Cmdline, "workload") {
			t.Errorf("workload %d: command line %q", rep.PID, p.Info.Cmdline)
		}
	}
	// Only the tree is traced: the session's drops are the tree's.
	if d := out.Result.Drops; d.Lost() != 0 || d.OrphanReturns != 0 || d.Submitted != d.Received {
		t.Errorf("drops: %+v, want none", d)
	}
}

// The shell's children, each traced exactly, in its own section, with the
// shell as its parent; the shell itself is there, without CUDA calls.
func TestFollowShellChildren(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, reps := followRun(t, "sh", "-c", fmt.Sprintf("%[1]s --iters 5 & %[1]s --iters 7 --scenario ptsz & wait", b.Workload))
	var sh uint32
	for _, p := range out.Result.Processes {
		if p.Info.Comm == "sh" {
			sh = p.PID
			if p.NCalls != 0 || p.Info.Parent != 0 {
				t.Errorf("sh: %d calls, parent %d; want none, a root", p.NCalls, p.Info.Parent)
			}
		}
	}
	if sh == 0 {
		t.Fatalf("no sh among %d processes", len(out.Result.Processes))
	}
	checkTree(t, out, reps, 2, func(*sim.Report) uint32 { return sh })
}

// A Python launcher forks a worker that loads the runtime itself
// (ctypes: a dlopen in a process that was only forked), and another that
// executes a CUDA program; a daemon is double-forked and outlives the
// command: every one traced exactly, the session running until the last.
func TestFollowForkExecDaemon(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	script := fmt.Sprintf(`import os, sys
def fork(fn):
    pid = os.fork()
    if pid == 0:
        fn()
        os._exit(0)
    return pid
def ctypes_worker():
    os.execv(sys.executable, [sys.executable, %[1]q, %[2]q, "3"])
def exec_worker():
    os.execv(%[3]q, [%[3]q, "--iters", "4"])
def daemon():
    if os.fork() == 0:
        os.setsid()
        os.execv(%[3]q, [%[3]q, "--iters", "6", "--scenario", "launches"])
a, c = fork(ctypes_worker), fork(exec_worker)
d = fork(daemon)
for p in (a, c, d):
    os.waitpid(p, 0)
`, b.PySync, b.Runtime, b.Workload)
	out, reps := followRun(t, "python3", "-c", script)
	if len(reps) != 3 {
		t.Fatalf("%d reports, want 3 (the ctypes worker, the executed one, the daemon)", len(reps))
	}
	for _, rep := range reps {
		if tracedOf(t, out, rep.PID) == nil {
			t.Errorf("process %d (%v) not traced", rep.PID, rep.Calls)
			continue
		}
		checkCounts(t, out, rep)
	}
}

// Fifty short-lived children, ten at a time: each exact.
func TestFollowManyShortChildren(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	script := fmt.Sprintf("for i in 1 2 3 4 5; do for j in 1 2 3 4 5 6 7 8 9 10; do %s --iters 2 --scenario launches & done; wait; done", b.Workload)
	out, reps := followRun(t, "sh", "-c", script)
	checkTree(t, out, reps, 50, nil)
}

// A program whose first CUDA call is a launch: the runtime loads the
// driver inside it, and the launch is counted once (240 = 240), followed
// or not.
func TestFirstCallALaunch(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, follow := range []bool{true, false} {
		t.Run(fmt.Sprintf("follow=%v", follow), func(t *testing.T) {
			out, rep := launchWith(t, Config{Command: []string{b.Workload, "--scenario", "launches", "--iters", "240"}, Follow: follow,
				Stacks: probe.StacksNone, Stderr: os.Stderr, NVMLInterval: -1, Duration: time.Minute})
			p := tracedOf(t, out, rep.PID)
			if p == nil {
				t.Fatal("not traced")
			}
			n := 0
			for _, s := range p.Streams {
				if s != nil {
					n += int(s.Stats.Launches)
				}
			}
			if n != 240 || launches(countsBySymbol(out.Result, rep.PID)) != 240 {
				t.Errorf("%d launches on streams, %d calls; the program made 240", n, launches(countsBySymbol(out.Result, rep.PID)))
			}
			checkCounts(t, out, rep)
		})
	}
}

// A tree that never loads CUDA: every process is there, none with a call.
func TestFollowNoCUDA(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	out, reps := followRun(t, "sh", "-c", "true; sh -c true")
	if len(reps) != 0 {
		t.Fatalf("reports %v", reps)
	}
	var comms []string
	for _, p := range out.Result.Processes {
		comms = append(comms, p.Info.Comm)
		if p.NCalls != 0 {
			t.Errorf("%s (%d): %d calls", p.Info.Comm, p.PID, p.NCalls)
		}
	}
	if !slices.Contains(comms, "sh") {
		t.Errorf("processes %v, want the shells", comms)
	}
}

// -p PID --follow: a running process and its present and future
// descendants. The target has started a child already, which loads CUDA
// once told; told in turn, it starts another: both traced exactly.
func TestFollowRunning(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	script := fmt.Sprintf(`import os, sys
r, w = os.pipe()
present = os.fork()
if present == 0:
    os.close(w)
    os.read(r, 1)  # until the parent says go
    os.execv(%[1]q, [%[1]q, "--iters", "3"])
os.close(r)
print("ready", flush=True)
sys.stdin.readline()  # the tracer is attached
os.write(w, b"g")
future = os.fork()
if future == 0:
    os.execv(%[1]q, [%[1]q, "--iters", "5", "--scenario", "ptsz"])
for p in (present, future):
    os.waitpid(p, 0)
`, b.Workload)
	cmd := exec.Command("python3", "-c", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewReader(pr)
	if l, _ := lines.ReadString('\n'); l != "ready\n" {
		t.Fatalf("target: %q", l)
	}
	go io.Copy(&stdout, lines)
	attached := make(chan struct{})
	go func() {
		<-attached
		stdin.Write([]byte("go\n"))
	}()
	out, err := runTraced(context.Background(), Config{PIDs: []int{cmd.Process.Pid}, Follow: true, Stacks: probe.StacksSync,
		NVMLInterval: -1, Duration: 2 * time.Minute, Observer: Funcs{OnAttached: func(int) { close(attached) }}})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	pw.Close()
	var reps []*sim.Report
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "{") {
			rep, err := sim.ParseReport([]byte(line))
			if err != nil {
				t.Fatal(err)
			}
			reps = append(reps, rep)
		}
	}
	checkTree(t, out, reps, 2, func(*sim.Report) uint32 { return uint32(cmd.Process.Pid) })
}
