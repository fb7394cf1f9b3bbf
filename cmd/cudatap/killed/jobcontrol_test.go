package killed

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
)

// TestKilledInHoldUnderJobControl: cudatap run as a shell with job control
// runs it, in a process group of its own inside the shell's session, and
// killed while the command it launched is held at a library load. When
// cudatap dies, the kernel signals SIGHUP to a process group that becomes
// orphaned with a stopped member (review 1b: 9 of 9 commands died). The
// command must run to its end, with the output of an untraced run.
//
// A small Python "shell" leads a session of its own and runs cudatap as a
// job (a process group of its own). This test is a subreaper outside that
// session: orphans come to it (and are reaped), but it is no link that
// would keep their group from being orphaned, as a shell's init is not.
func TestKilledInHoldUnderJobControl(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	bin := testutil.Cudatap(t)
	workload := []string{b.DlopenWorkload, "--dlopen", b.Runtime, "--scenario", "basic", "--iters", "3"}
	untraced, err := exec.Command(workload[0], workload[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.ParseReport(untraced)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	const shell = `import subprocess, sys
out = open(sys.argv[1], "w")
p = subprocess.Popen(sys.argv[2:], process_group=0, stdout=out, stderr=out)
print(p.pid, flush=True)
p.wait()`
	dir := t.TempDir()
	held := 0
	for round := 0; round < 9; round++ {
		out := filepath.Join(dir, fmt.Sprintf("out%d", round))
		args := append([]string{"-c", shell, out, bin, "record", "-q", "--nvml-interval=-1s", "-o", filepath.Join(dir, "p.pb.gz"), "--"}, workload...)
		sh := exec.Command("python3", args...)
		sh.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		stdout, err := sh.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Start(); err != nil {
			t.Fatal(err)
		}
		var rec int
		if _, err := fmt.Fscan(stdout, &rec); err != nil {
			t.Fatalf("the shell: %v", err)
		}
		// Kill it at the command's first or second hold seen (a hold
		// lasts milliseconds: the second is not always seen).
		cmd := heldChild(t, rec, filepath.Base(workload[0]), round%2+1)
		if cmd != 0 && stateOf(cmd) == "T" {
			held++ // the kill lands in a hold (unless it ends right now)
		}
		unix.Kill(rec, unix.SIGKILL)
		sh.Wait()
		statuses := reapAll(t, 30*time.Second) // the command, the guardian, the anchor
		if cmd == 0 {
			t.Logf("round %d: the command was not seen held", round)
			continue
		}
		got, _ := os.ReadFile(out)
		rep, err := sim.ParseReport(got)
		if err != nil {
			t.Errorf("round %d: the command did not finish (exits %v): %v\n%s", round, statuses, err, got)
			continue
		}
		if !reflect.DeepEqual(rep.Calls, want.Calls) {
			t.Errorf("round %d: calls %v, untraced %v", round, rep.Calls, want.Calls)
		}
		for _, st := range statuses {
			if st != 0 {
				t.Errorf("round %d: a process exited with %d:\n%s", round, st, got)
			}
		}
	}
	t.Logf("%d of 9 kills aimed at a hold", held)
	if held == 0 {
		t.Error("no kill landed in a hold: the test did not test what it is for")
	}
}

// heldChild waits until the child of parent named comm is stopped (held at
// a library load) for the n-th time seen, and returns its pid; 0 if it
// never is.
func heldChild(t *testing.T, parent int, comm string, n int) int {
	t.Helper()
	seen, wasHeld := 0, false
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		pid := childNamed(parent, comm)
		if pid == 0 {
			if !procfs.Alive(parent) {
				return 0
			}
			time.Sleep(time.Millisecond) // polling a condition of the child
			continue
		}
		st, err := procfs.Stat(pid)
		if err != nil {
			return 0
		}
		isHeld := st.State == 'T'
		if isHeld && !wasHeld {
			seen++
			if seen == n {
				return pid
			}
		}
		wasHeld = isHeld
		if !isHeld && seen > 0 && st.State == 'Z' {
			return 0
		}
		time.Sleep(100 * time.Microsecond)
	}
	return 0
}

// childNamed is the child of parent whose comm starts with comm.
func childNamed(parent int, comm string) int {
	pids, _ := procfs.PIDs()
	for _, p := range pids {
		if ppid, name := parentOf(p); ppid == parent && strings.HasPrefix(comm, name) {
			return p
		}
	}
	return 0
}

// parentOf is the parent of process pid and pid's comm (0, "" if gone).
func parentOf(pid int) (int, string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, ""
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, ""
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return 0, ""
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid, s[open+1 : end]
}

func stateOf(pid int) string {
	st, err := procfs.Stat(pid)
	if err != nil {
		return err.Error()
	}
	return string(st.State)
}

// TestKilledWithGuardianDuringInjection: cudatap and its guardian killed
// together (a container stop, a cgroup OOM kill, killall -9) while the
// guardian has a thread of the target borrowed to load the GPU-time
// collector (review 5c: 7 of 17 targets died of SIGSEGV). Every target
// finishes with the output of an untraced run.
func TestKilledWithGuardianDuringInjection(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	bin := testutil.Cudatap(t)
	workload := []string{b.Workload, "--scenario", "basic", "--iters", "4000"}
	untraced, err := exec.Command(workload[0], workload[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.ParseReport(untraced)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	rounds := 20
	if n, err := strconv.Atoi(os.Getenv("CUDATAP_KILL_ROUNDS")); err == nil && n > 0 {
		rounds = n // the 100, by hand
	}
	rng := rand.New(rand.NewPCG(3, 5))
	dir := t.TempDir()
	borrowed := 0
	for round := 0; round < rounds; round++ {
		out := filepath.Join(dir, fmt.Sprintf("w%d", round))
		wout, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		w := exec.Command(workload[0], workload[1:]...)
		w.Stdout = wout
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		rec := exec.Command(bin, "record", "-q", "--nvml-interval=-1s", "-p", strconv.Itoa(w.Process.Pid), "--gpu-times", "-d", "10s",
			"-o", filepath.Join(dir, "x.cudatap"))
		if err := rec.Start(); err != nil {
			t.Fatal(err)
		}
		// The guardian borrows a thread while it loads the collector:
		// kill both then, a random few hundred microseconds in.
		// Only cudatap's own guardian (its child): under another test
		// run's --all session with GPU times, another tracer may borrow
		// the target, and this test must not kill that.
		tracer := 0
		for deadline := time.Now().Add(20 * time.Second); tracer == 0 && time.Now().Before(deadline) && procfs.Alive(w.Process.Pid); {
			if p := tracerPid(w.Process.Pid); p != 0 {
				if ppid, _ := parentOf(p); ppid == rec.Process.Pid {
					tracer = p
				}
			}
		}
		if tracer != 0 {
			time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond) // the moment of the kill is what this test varies
			if tracerPid(w.Process.Pid) == tracer {
				borrowed++
			}
			unix.Kill(rec.Process.Pid, unix.SIGKILL)
			unix.Kill(tracer, unix.SIGKILL)
		} else {
			rec.Process.Kill()
		}
		rec.Wait()
		werr := w.Wait()
		wout.Close()
		reapAll(t, 30*time.Second) // the guardian
		got, _ := os.ReadFile(out)
		if werr != nil {
			t.Errorf("round %d: the target: %v (borrowed by %d)\n%s", round, werr, tracer, got)
			continue
		}
		rep, err := sim.ParseReport(got)
		if err != nil {
			t.Errorf("round %d: %v\n%s", round, err, got)
			continue
		}
		// Stream handles are addresses: they differ from run to run.
		if !reflect.DeepEqual(rep.Calls, want.Calls) || !reflect.DeepEqual(rep.Internal, want.Internal) || !reflect.DeepEqual(busyTimes(rep), busyTimes(want)) {
			t.Errorf("round %d: %+v, untraced %+v", round, rep, want)
		}
	}
	t.Logf("%d of %d kills landed while the guardian had the target borrowed", borrowed, rounds)
	if borrowed == 0 {
		t.Error("no kill landed during the injection: the test did not test what it is for")
	}
}

// busyTimes are a report's busy times per stream, sorted.
func busyTimes(r *sim.Report) []int64 {
	var out []int64
	for _, ns := range r.BusyNs {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// tracerPid is the TracerPid of process pid (0: none).
func tracerPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "TracerPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// TestKilledWhileDescendantHeld: a followed command's child is held at its
// exec (until cudatap has hooked what it maps) when cudatap is killed: the
// guardian, which reads the followed tree's table, continues it, and it
// runs to its end with the output of an untraced run.
func TestKilledWhileDescendantHeld(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	bin := testutil.Cudatap(t)
	workload := []string{b.Workload, "--scenario", "basic", "--iters", "3"}
	untraced, err := exec.Command(workload[0], workload[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.ParseReport(untraced)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	dir := t.TempDir()
	held := 0
	for round := 0; round < 6; round++ {
		out := filepath.Join(dir, fmt.Sprintf("out%d", round))
		stdout, err := os.Create(out)
		if err != nil {
			t.Fatal(err)
		}
		// The shell forks, and its child executes the workload: held at
		// that exec, a grandchild of cudatap.
		rec := exec.Command(bin, "record", "-q", "--nvml-interval=-1s", "-o", filepath.Join(dir, "x.cudatap"), "--",
			"sh", "-c", strings.Join(workload, " ")+"; true")
		rec.Stdout, rec.Stderr = stdout, stdout
		if err := rec.Start(); err != nil {
			t.Fatal(err)
		}
		sh := 0
		for deadline := time.Now().Add(30 * time.Second); sh == 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			sh = childNamed(rec.Process.Pid, "sh")
		}
		w := heldChild(t, sh, filepath.Base(workload[0]), 1)
		if w != 0 && stateOf(w) == "T" {
			held++
		}
		rec.Process.Kill() // not the guardian
		rec.Wait()
		stdout.Close()
		statuses := reapAll(t, 30*time.Second)
		got, _ := os.ReadFile(out)
		rep, err := sim.ParseReport(got)
		if err != nil {
			t.Errorf("round %d: the workload did not finish (exits %v): %v\n%s", round, statuses, err, got)
			continue
		}
		if !reflect.DeepEqual(rep.Calls, want.Calls) {
			t.Errorf("round %d: calls %v, untraced %v", round, rep.Calls, want.Calls)
		}
	}
	t.Logf("%d of 6 kills aimed at a held grandchild", held)
	if held == 0 {
		t.Error("no kill landed while the grandchild was held: the test did not test what it is for")
	}
}
