package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/merge/mergetest"
)

// processNames maps trace pid → process_name of the processes' own
// tracks (not their GPU tracks).
func processNames(tr chromeTrace) map[float64]string {
	out := map[float64]string{}
	for _, e := range tr.TraceEvents {
		if e["ph"] == "M" && e["name"] == "process_name" {
			pid := e["pid"].(float64)
			if pid < 1e9 {
				out[pid] = e["args"].(map[string]any)["name"].(string)
			}
		}
	}
	return out
}

// TestMergeCLI merges a simulated three-host job (clocks seconds apart,
// wall clocks tens of ms off, rank 1 late) into a Chrome trace (plain and
// gzipped) and a merged recording; `cudatap export` of that recording
// names the same straggler.
func TestMergeCLI(t *testing.T) {
	dir := t.TempDir()
	ins := mergetest.ThreeHosts().Write(t, dir)
	js, gz, rec, pf := filepath.Join(dir, "job.json"), filepath.Join(dir, "job.json.gz"), filepath.Join(dir, "job.cudatap"), filepath.Join(dir, "job.perfetto-trace")
	stdout, stderr, err := run(t, append(append([]string{"merge"}, ins...), "-o", js, "-o", gz, "-o", rec, "-o", pf)...)
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, stderr)
	}
	for _, want := range []string{"merging 3 recording(s) on the clock of " + ins[0], "(host nodeB, pid 100 as 4194304, rank 1): shifted -3.69",
		"NCCL meeting(s)", "wrote " + js, "wrote " + rec, "wrote " + pf + " (perfetto)"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	straggler := "straggler: rank 1 (pid 100 on nodeB)"
	for _, want := range []string{straggler, "before: cudaMemcpyAsync at train.py:42 load_batch", "dropped events: 0"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	for _, path := range []string{js, gz} {
		tr := readChrome(t, path)
		names := processNames(tr)
		if names[100] != "rank 0 of 3 — python3 (pid 100 on nodeA)" || names[1<<22] != "rank 1 of 3 — python3 (pid 100 on nodeB)" ||
			names[1<<22+1] != "rank 2 of 3 — python3 (pid 100 on nodeC)" {
			t.Errorf("%s: process names %v", path, names)
		}
		m, _ := tr.Cudatap["merge"].(map[string]any)
		inputs, _ := m["inputs"].([]any)
		if len(inputs) != 3 {
			t.Fatalf("%s: merge info %v", path, tr.Cudatap)
		}
		b := inputs[1].(map[string]any)
		if u, ok := b["uncertainty_ns"].(float64); !ok || u <= 0 || u > 2e6 || b["method"] != "host_bounds" || b["host"] != "nodeB" {
			t.Errorf("%s: input B %v", path, b)
		}
	}

	// The merged recording exports like any other, naming the hosts.
	again := filepath.Join(dir, "again.json")
	stdout2, stderr2, err := run(t, "export", rec, "-o", again)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, stderr2)
	}
	if !strings.Contains(stdout2, straggler) {
		t.Errorf("export of the merged recording lacks %q:\n%s", straggler, stdout2)
	}
	tr := readChrome(t, again)
	if names := processNames(tr); names[1<<22] != "rank 1 of 3 — python3 (pid 100 on nodeB)" {
		t.Errorf("exported names %v", names)
	}
	if _, ok := tr.Cudatap["merge"]; !ok {
		t.Errorf("exported trace lacks the merge info: %v", tr.Cudatap)
	}
}

// TestMergeCLIBadInput: each bad input is refused with what to do next; a
// truncated recording or one without NCCL is merged, saying so.
func TestMergeCLIBadInput(t *testing.T) {
	dir := t.TempDir()
	job := mergetest.ThreeHosts()
	job.Hosts[2].NoNCCL = true
	ins := job.Write(t, dir)
	out := filepath.Join(dir, "job.json")
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	b, _ := os.ReadFile(ins[1])
	cut := filepath.Join(dir, "cut.cudatap")
	os.WriteFile(cut, b[:len(b)/2], 0o644)

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"not a recording", []string{ins[0], text, "-o", out}, []string{text, "not a cudatap recording", "cudatap record"}},
		{"unknown extension", []string{ins[0], ins[1], "-o", filepath.Join(dir, "job.txt")}, []string{"job.txt", ".json/.json.gz", ".cudatap"}},
		{"same rank twice", []string{ins[0], ins[1], ins[1] + ".copy", "-o", out}, []string{"both hold rank 1", "give each rank's recording once"}},
		{"same file twice", []string{ins[0], ins[0], "-o", out}, []string{"same file", "give each recording once"}},
		{"missing", []string{ins[0], filepath.Join(dir, "nope.cudatap")}, []string{"nope.cudatap", "no such file"}},
		{"to stdout", []string{ins[0], ins[1], "-o", "-", "--format", "cudatap"}, []string{"does not write to the standard output", "give a file"}},
	} {
		if tc.name == "same rank twice" {
			os.WriteFile(ins[1]+".copy", b, 0o644)
		}
		_, stderr, err := run(t, append([]string{"merge"}, tc.args...)...)
		if err == nil {
			t.Errorf("%s: merged\n%s", tc.name, stderr)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Errorf("%s: %s written", tc.name, out)
		}
	}

	// Truncated, and a host without NCCL: merged, with the reasons, and
	// exit status 6 (partial: an input was cut), as export's.
	stdout, stderr, err := run(t, "merge", ins[0], cut, ins[2], "-o", out)
	if exitCode(err) != exitPartial {
		t.Fatalf("merge with a cut input: %v (exit %d), want exit %d\n%s", err, exitCode(err), exitPartial, stderr)
	}
	for _, want := range []string{"truncated: recording is truncated", "records read); merged up to the cut",
		"no NCCL communicator was seen in it", "how well the hosts' clocks were synchronized", "wrote " + out} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if !strings.Contains(stdout, "recording truncated") || !strings.Contains(stdout, "straggler: rank 1 (pid 100 on nodeB)") {
		t.Errorf("summary:\n%s", stdout)
	}
}

// TestMergeCLIBadOutput: an output that cannot be written is refused
// before any merging, naming it, and nothing is written or said written.
func TestMergeCLIBadOutput(t *testing.T) {
	dir := t.TempDir()
	ins := mergetest.ThreeHosts().Write(t, dir)
	blocker := filepath.Join(dir, "not-a-dir")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad, good := filepath.Join(blocker, "job.json"), filepath.Join(dir, "job.cudatap")
	_, stderr, err := run(t, append(append([]string{"merge"}, ins...), "-o", good, "-o", bad)...)
	if err == nil || !strings.Contains(err.Error(), "cannot write output "+bad) {
		t.Fatalf("merge into %s: err %v, want it refused by name:\n%s", bad, err, stderr)
	}
	if strings.Contains(stderr, "wrote ") {
		t.Errorf("nothing was written, yet:\n%s", stderr)
	}
	if _, err := os.Stat(good); !os.IsNotExist(err) {
		t.Errorf("%s exists after a refused merge (%v)", good, err)
	}
}
