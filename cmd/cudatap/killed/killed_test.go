package killed

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestKilledRecorderLeavesRecording: record killed (-9) mid-run leaves its
// recording under its own name, readable to within the last second (the
// guardian renames it), which export reads and says was cut (exit status
// 6); nothing else stays behind, beside it or in /tmp (the collector
// directory it made there for GPU times). With only a Chrome trace asked
// for, the spill file it would have been made from is gone.
func TestKilledRecorderLeavesRecording(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	bin := testutil.Cudatap(t)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	for _, out := range []string{"x.cudatap", "x.json"} {
		t.Run(out, func(t *testing.T) {
			dir := t.TempDir()
			// flood 1 0 launches until its stdin closes (after a line).
			rec := exec.Command(bin, "record", "-q", "--nvml-interval=-1s", "-o", filepath.Join(dir, out), "--", b.Flood, "1", "0")
			stdin, err := rec.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := rec.Start(); err != nil {
				t.Fatal(err)
			}
			defer stdin.Close()
			stdin.Write([]byte("go\n"))
			defer rec.Process.Kill()
			// Kill it once it has flushed something (a second in). What it
			// holds open in /tmp then must be gone once it and its
			// guardian are (other test runs' cudatap may be making
			// their own there meanwhile).
			var inTmp []string
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				inTmp = tmpEntries(rec.Process.Pid)
				if flushed(t, dir, rec.Process.Pid) {
					break
				}
			}
			rec.Process.Kill()
			rec.Wait()
			stdin.Close()              // flood ends
			reapAll(t, 30*time.Second) // the guardian, and flood
			t.Logf("held open in %s when killed: %v", os.TempDir(), inTmp)
			left, _ := filepath.Glob(filepath.Join(dir, ".*"))
			for _, e := range inTmp {
				if _, err := os.Lstat(e); err == nil {
					left = append(left, e)
				}
			}
			if len(left) > 0 {
				t.Errorf("left behind: %v", left)
			}
			if out != "x.cudatap" {
				return
			}
			path := filepath.Join(dir, out)
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatalf("no recording under its name: %v", err)
			}
			if fi.Mode().Perm() != 0o644 {
				t.Errorf("recording mode %o, want 0644", fi.Mode().Perm())
			}
			cmd := exec.Command(bin, "export", path, "-o", filepath.Join(dir, "y.json"))
			got, _ := cmd.CombinedOutput()
			// Exit status 6: outputs written from a recording that was cut.
			if code := cmd.ProcessState.ExitCode(); code != 6 || !strings.Contains(string(got), "truncated") {
				t.Errorf("export of the killed recording: exit %d, want 6, saying it was cut:\n%s", code, got)
			}
		})
	}
}

// flushed: the recording's temporary file, or the spill file cudatap
// writes through /proc/PID/fd, holds something.
func flushed(t *testing.T, dir string, pid int) bool {
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, fd := range fds {
		target, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if err != nil || !strings.HasPrefix(target, dir+"/.") {
			continue
		}
		if fi, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name()); err == nil && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// tmpEntries lists cudatap's entries in the temporary directory that
// process pid holds open.
func tmpEntries(pid int) []string {
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	var out []string
	for _, fd := range fds {
		target, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + fd.Name())
		if err == nil && filepath.Dir(target) == os.TempDir() &&
			(strings.Contains(target, "cudatap-spill") || strings.Contains(target, "cudatap-gputimes")) {
			out = append(out, target)
		}
	}
	return out
}
