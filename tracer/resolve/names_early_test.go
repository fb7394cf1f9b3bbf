package resolve

import (
	"io"
	"os/exec"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/symbolize"
	"github.com/cudatap/cudatap/symbolize/python"
)

// TestProcessNamedAgainAtFirstCall: a process named before its first call
// (running when the session went live: a launched command may not have
// exec'd yet, and showed as cudatap) is named again at its first call.
func TestProcessNamedAgainAtFirstCall(t *testing.T) {
	cmd := exec.Command("sh", "-c", "read x; exec sleep 30")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := uint32(cmd.Process.Pid)
	r := New(noLookup{}, nil, nil, nil)
	r.ProcessEarly(pid)
	if got := r.names.Procs[pid].Comm; got != "sh" {
		t.Fatalf("named %q before exec, want sh", got)
	}
	io.WriteString(stdin, "go\n")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		if c, _ := procfs.Comm(int(pid)); c == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sh did not exec sleep within a minute")
		}
	}
	r.process(pid) // its first call
	if got := r.names.Procs[pid].Comm; got != "sleep" {
		t.Errorf("named %q at its first call, want sleep (the name after exec)", got)
	}
	r.process(pid) // later calls: named once is enough
	if r.early[pid] {
		t.Error("still to be named again after its first call")
	}
}

// noLookup knows no process: names come from /proc alone.
type noLookup struct{}

func (noLookup) Process(uint32) *symbolize.Process                 { return nil }
func (noLookup) IsRuntimeFile(uint32, string, uint64, string) bool { return false }
func (noLookup) Libraries(uint32) []string                         { return nil }
func (noLookup) AttachedLate(uint32) bool                          { return false }
func (noLookup) Python(uint32, bool) *python.Interpreter           { return nil }
func (noLookup) Parent(uint32) uint32                              { return 0 }
