package targets

import (
	"os"
	"testing"

	"github.com/cudatap/cudatap/internal/procfs"
)

// A PID names the process sampled out only with the start time it had:
// a new process under a reused PID is traced.
func TestSampledOutNeedsSameProcess(t *testing.T) {
	st, err := procfs.Stat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !sampledOut(map[int]uint64{os.Getpid(): st.StartTicks}, os.Getpid()) {
		t.Error("this process, with its start time, is not sampled out")
	}
	if sampledOut(map[int]uint64{os.Getpid(): st.StartTicks + 1}, os.Getpid()) {
		t.Error("another start time under this PID is sampled out")
	}
	if sampledOut(nil, os.Getpid()) {
		t.Error("sampled out with no sampling")
	}
}
