package killed

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
)

// TestKilledRecorderReleasesHolds kills cudatap (SIGKILL) at random moments
// while it launches and traces a program that loads CUDA late, so that
// many kills land while the program is held at a library load. The program
// must always run to its end, with the output of an untraced run.
func TestKilledRecorderReleasesHolds(t *testing.T) {
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
	// Orphans (the program, the guardian) become this test's children.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)

	rounds := 25
	if testing.Short() {
		rounds = 5
	}
	if n, err := strconv.Atoi(os.Getenv("CUDATAP_KILL_ROUNDS")); err == nil && n > 0 {
		rounds = n // the 100, or more, by hand
	}
	rng := rand.New(rand.NewPCG(7, 11))
	dir := t.TempDir()
	for i := 0; i < rounds; i++ {
		out := filepath.Join(dir, fmt.Sprintf("out%d", i))
		stdout, err := os.Create(out) // a file, not a pipe: nobody waits on a copy
		if err != nil {
			t.Fatal(err)
		}
		rec := exec.Command(bin, append([]string{"record", "--nvml-interval=-1s", "-o", filepath.Join(dir, "p.pb.gz"), "--"}, workload...)...)
		rec.Stdout, rec.Stderr = stdout, stdout
		if err := rec.Start(); err != nil {
			t.Fatal(err)
		}
		// The moment of the kill is what this test varies.
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond)
		rec.Process.Kill()
		rec.Wait()
		stdout.Close()
		statuses := reapAll(t, 30*time.Second)
		b, _ := os.ReadFile(out)
		if rep, err := sim.ParseReport(b); err == nil {
			if !reflect.DeepEqual(rep.Calls, want.Calls) {
				t.Errorf("round %d: the traced program's calls %v, untraced %v", i, rep.Calls, want.Calls)
			}
		} else if strings.Contains(string(b), "attached to") {
			// cudatap had started the program: it must have finished.
			t.Errorf("round %d: no report from the program (exits %v):\n%s", i, statuses, b)
		}
		for _, st := range statuses {
			if st != 0 {
				t.Errorf("round %d: a child exited with %d:\n%s", i, st, b)
			}
		}
	}
}

// reapAll waits for every child this (subreaper) process has left, up to
// d; one that is still there then is reported, with its state, and killed.
func reapAll(t *testing.T, d time.Duration) []int {
	t.Helper()
	var statuses []int
	for deadline := time.Now().Add(d); ; {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case err == unix.ECHILD:
			return statuses
		case err != nil:
			t.Fatal(err)
		case pid > 0:
			st := ws.ExitStatus()
			if ws.Signaled() {
				t.Logf("child %d killed by %v", pid, ws.Signal())
			}
			statuses = append(statuses, st)
			continue
		}
		if time.Now().After(deadline) {
			for _, p := range children() {
				st, _ := procfs.Stat(p)
				status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
				var why []string
				for _, l := range strings.Split(string(status), "\n") {
					if strings.HasPrefix(l, "TracerPid:") || strings.HasPrefix(l, "SigPnd:") || strings.HasPrefix(l, "ShdPnd:") {
						why = append(why, strings.Join(strings.Fields(l), " "))
					}
				}
				t.Errorf("process %d (%s) still there after %v, state %c; %s", p, strings.ReplaceAll(string(cmdline), "\x00", " "),
					d, st.State, strings.Join(why, ", "))
				unix.Kill(p, unix.SIGKILL)
				unix.Kill(p, unix.SIGCONT)
			}
			deadline = time.Now().Add(d)
		}
		time.Sleep(5 * time.Millisecond) // polling for exits with a deadline
	}
}

// children lists this process's children.
func children() []int {
	var out []int
	pids, _ := procfs.PIDs()
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == os.Getpid() {
				out = append(out, p)
			}
		}
	}
	return out
}
