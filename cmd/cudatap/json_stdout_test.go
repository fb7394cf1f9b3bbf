package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestRecordJSONStdout: with --json, stdout is the summary alone, a JSON
// document a script can parse; what the launched command prints goes to
// stderr (the real binary: the command's stdout is the process's).
func TestRecordJSONStdout(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	bin := buildCudatap(t)
	rec := filepath.Join(t.TempDir(), "run.cudatap")
	cmd := exec.Command(bin, "record", "--json", "--nvml-interval=-1s", "-o", rec, "--",
		"sh", "-c", `echo hello-from-the-job; exec "$0" --scenario basic`, b.Workload)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr.String())
	}
	var sum struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil || len(sum.Processes) == 0 {
		t.Fatalf("stdout is not the JSON summary alone (%v):\n%s", err, stdout.String())
	}
	if !strings.Contains(stderr.String(), "hello-from-the-job") {
		t.Errorf("the job's own output is not on stderr:\n%s", stderr.String())
	}
}
