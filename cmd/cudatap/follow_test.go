package main

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestRecordDefaultOutput: record without -o writes a recording named
// after the command and the time in the current directory, and says how to
// open it; the recording reads back with the command's processes.
func TestRecordDefaultOutput(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	t.Chdir(dir)
	_, stderr, err := run(t, "record", "--nvml-interval=-1s", "--", "sh", "-c", b.Workload+" --iters 3")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	recs, _ := filepath.Glob(filepath.Join(dir, "cudatap-sh-*.cudatap"))
	if len(recs) != 1 {
		t.Fatalf("recordings %v in %s, want one cudatap-sh-YYYYMMDD-HHMMSS.cudatap\n%s", recs, dir, stderr)
	}
	name := filepath.Base(recs[0])
	if !strings.Contains(stderr, "cudatap report "+name) || !strings.Contains(stderr, "wrote "+name) {
		t.Errorf("stderr does not say where the recording is and how to open it:\n%s", stderr)
	}
	out, _, err := run(t, "export", "--json", recs[0])
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Processes []struct {
			Comm   string `json:"comm"`
			Parent uint32 `json:"parent"`
			Calls  int64  `json:"calls"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(out), &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Processes) != 2 || sum.Processes[0].Comm != "sh" || sum.Processes[1].Comm != "workload" ||
		sum.Processes[1].Calls == 0 || sum.Processes[1].Parent == 0 {
		t.Errorf("processes %+v, want sh and its workload (with calls, sh as its parent)", sum.Processes)
	}
}

// TestRecordFollowFlags: --follow goes with -p, --no-follow with a command.
func TestRecordFollowFlags(t *testing.T) {
	for _, args := range [][]string{
		{"record", "--follow", "--", "true"},
		{"record", "--no-follow", "-p", "1"},
		{"record", "--follow", "--no-follow", "-p", "1"},
	} {
		_, _, err := run(t, args...)
		if code := exitCode(err); code != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", args, code, err, exitUsage)
		}
	}
}

// TestRecordPassesSignals: a SIGTERM sent to cudatap reaches the command it
// launched, as it would without cudatap; cudatap traces it to its end and
// exits with its status.
func TestRecordPassesSignals(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildCudatap(t)
	script := `import signal, sys
signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))
print("ready", flush=True)
signal.pause()`
	cmd := exec.Command(bin, "record", "-q", "--nvml-interval=-1s", "-o", filepath.Join(t.TempDir(), "x.cudatap"), "--", "python3", "-c", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line, _ := bufio.NewReader(out).ReadString('\n'); line != "ready\n" {
		cmd.Process.Kill()
		t.Fatalf("command: %q", line)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Errorf("record exited %d (%v), want the command's 7\n%s", code, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "passed SIGTERM to the command") {
		t.Errorf("stderr does not say the signal was passed on:\n%s", stderr.String())
	}
}

// TestRecordExitStatusOfTree: record exits with the command's status, here
// a shell's, whose child traced meanwhile.
func TestRecordExitStatusOfTree(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	_, stderr, err := run(t, "record", "-q", "--nvml-interval=-1s", "-o", filepath.Join(t.TempDir(), "x.cudatap"),
		"--", "sh", "-c", b.Workload+" --iters 2 >/dev/null; exit 3")
	if code := exitCode(err); code != 3 {
		t.Errorf("exit %d (%v), want 3\n%s", code, err, stderr)
	}
}
