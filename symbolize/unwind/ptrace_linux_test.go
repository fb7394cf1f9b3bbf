package unwind

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/cudatap/cudatap/symbolize"
)

// A real CPython, stopped with ptrace wherever it is (normally blocked in
// read): its stack, taken the way the BPF program takes it, must unwind
// much further than frame pointers get. CPython is built without them.
func TestPtracePython(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("x86-64 only")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-c", "import sys\ndef f():\n  print('ready', flush=True)\n  sys.stdin.read()\ndef g():\n  f()\ng()\n")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready") {
		t.Skipf("python3 did not start: %q %v", line, err)
	}

	pid := cmd.Process.Pid
	runtime.LockOSThread() // ptrace requests must come from the tracing thread
	defer runtime.UnlockOSThread()
	if err := syscall.PtraceAttach(pid); err != nil {
		t.Skipf("ptrace: %v", err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil {
		t.Fatal(err)
	}
	var r syscall.PtraceRegs
	err = syscall.PtraceGetRegs(pid, &r)
	stack := make([]byte, 8192)
	if err == nil {
		var mem *os.File
		if mem, err = os.Open(fmt.Sprintf("/proc/%d/mem", pid)); err == nil {
			var n int
			n, err = mem.ReadAt(stack, int64(r.Rsp))
			if n > 0 {
				stack, err = stack[:n], nil
			}
			mem.Close()
		}
	}
	p, perr := symbolize.NewProcess(pid, nil)
	syscall.PtraceDetach(pid)
	if err != nil || perr != nil {
		t.Fatal(err, perr)
	}

	regs := Regs{RIP: r.Rip, RSP: r.Rsp, RBP: r.Rbp}
	pcs := New().Unwind(p, regs, stack, 64)
	fp := New().Unwind(nil, regs, stack, 64)
	got := names(p, pcs)
	t.Logf("%s: %d frames (frame pointers: %d): %v", py, len(pcs), len(fp), got)
	if len(pcs) < 8 || len(pcs) <= len(fp) {
		t.Errorf("CFI unwind found %d frames, frame pointers %d", len(pcs), len(fp))
	}
}
