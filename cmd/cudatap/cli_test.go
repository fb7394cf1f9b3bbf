package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/internal/testutil"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testutil.CleanupSim()
	os.Exit(code)
}

// run executes the CLI in-process and returns stdout, stderr and the error.
func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	err := root.ExecuteContext(context.Background())
	return stdout.String(), stderr.String(), err
}

type chromeTrace struct {
	TraceEvents []map[string]any `json:"traceEvents"`
	Cudatap     map[string]any   `json:"cudatap"`
}

func readChrome(t *testing.T, path string) chromeTrace {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		buf.ReadFrom(zr)
		b = buf.Bytes()
	}
	var tr chromeTrace
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tr
}

// countLaunches counts kernel-launch host slices: the driver counts every
// launch, the runtime only those made before libcuda was hooked.
func countLaunches(tr chromeTrace) int {
	n := 0
	for _, e := range tr.TraceEvents {
		if e["ph"] != "X" {
			continue
		}
		switch e["name"] {
		case "cudaLaunchKernel", "cuLaunchKernel":
			n++
		}
	}
	return n
}

// TestRecordThenExport launches the simulated workload under `record`,
// writing every format, then rebuilds the outputs from the recording with
// `export` and checks both agree.
func TestRecordThenExport(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	trace, prof, rec := filepath.Join(dir, "t.json"), filepath.Join(dir, "p.pb.gz"), filepath.Join(dir, "r.cudatap")
	stdout, stderr, err := run(t, "record", "-o", trace, "-o", prof, "-o", rec, "--", b.Workload, "--scenario", "basic", "--iters", "20")
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "attached to 1 process(es)") {
		t.Errorf("stderr lacks the attach line:\n%s", stderr)
	}
	if strings.Contains(stderr, "\r") {
		t.Errorf("status line printed although stderr is not a terminal")
	}
	for _, want := range []string{"dropped events: 0", "stream 0 (legacy default)", "pageable_memcpy"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	live := readChrome(t, trace)
	// basic with 2 streams: 2 gemm + 1 relu launch per iteration.
	if n := countLaunches(live); n != 60 {
		t.Errorf("trace has %d launch slices, want 60", n)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(f)
	f.Close()
	if err != nil || p.CheckValid() != nil {
		t.Fatalf("profile: %v %v", err, p.CheckValid())
	}

	// export from the recording gives the same trace.
	trace2 := filepath.Join(dir, "t2.json.gz")
	stdout2, stderr2, err := run(t, "export", rec, "-o", trace2)
	if err != nil {
		t.Fatalf("export: %v\n%s", err, stderr2)
	}
	replayed := readChrome(t, trace2)
	if len(replayed.TraceEvents) != len(live.TraceEvents) {
		t.Errorf("export has %d trace events, record wrote %d", len(replayed.TraceEvents), len(live.TraceEvents))
	}
	if stdout2 != stdout {
		t.Errorf("export summary differs from record's:\n%s\n---\n%s", stdout2, stdout)
	}

	// The same recording with every name record moved behind the events
	// exports byte-identical outputs: names are joined at export time.
	moved := filepath.Join(dir, "moved.cudatap")
	if err := os.WriteFile(moved, namesLast(t, rec), 0o644); err != nil {
		t.Fatal(err)
	}
	var outs [2][]string
	for i, in := range []string{rec, moved} {
		j, pb := filepath.Join(dir, fmt.Sprintf("o%d.json", i)), filepath.Join(dir, fmt.Sprintf("o%d.pb.gz", i))
		if _, stderr, err := run(t, "export", in, "-o", j, "-o", pb); err != nil {
			t.Fatalf("export %s: %v\n%s", in, err, stderr)
		}
		outs[i] = []string{j, pb}
	}
	for k := range outs[0] {
		a, _ := os.ReadFile(outs[0][k])
		b, _ := os.ReadFile(outs[1][k])
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s and %s differ (%d and %d bytes)", outs[0][k], outs[1][k], len(a), len(b))
		}
	}
}

// namesLast rewrites a recording with its name records (process, thread,
// kernel, frame, Python frame) moved just before the end record.
func namesLast(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 16 + int(binary.LittleEndian.Uint32(b[12:]))
	out := bytes.Clone(b[:off])
	var names []byte
	for off < len(b) {
		n, k := binary.Uvarint(b[off+1:])
		end := off + 1 + k + int(n)
		switch b[off] {
		case 2, 3, 4, 5, 8: // process, thread, kernel, frame, Python frame
			names = append(names, b[off:end]...)
		case 0xff: // end
			out = append(out, names...)
			out = append(out, b[off:end]...)
		default:
			out = append(out, b[off:end]...)
		}
		off = end
	}
	if len(names) == 0 {
		t.Fatal("the recording has no name records")
	}
	return out
}

func TestRecordRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"record"}, "nothing to trace"},
		{[]string{"record", "-p", "1", "-o", filepath.Join(dir, "no/such/dir/t.json")}, "cannot write output"},
		{[]string{"record", "-p", "1", "-o", filepath.Join(dir, "t.txt")}, "cannot tell the format"},
		{[]string{"record", "-p", "1", "--stacks", "some"}, "--stacks"},
		{[]string{"record", "-p", "1073741824"}, "does not exist"},
		{[]string{"export", filepath.Join(dir, "missing.cudatap"), "-o", filepath.Join(dir, "x.json")}, "open recording"},
	}
	for _, c := range cases {
		_, _, err := run(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
	}
}

func TestExportGarbageAndTruncated(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.cudatap")
	os.WriteFile(garbage, []byte("this is not a recording at all"), 0o644)
	if _, _, err := run(t, "export", garbage, "-o", filepath.Join(dir, "g.json")); err == nil || !strings.Contains(err.Error(), "not a cudatap recording") {
		t.Errorf("garbage: err = %v", err)
	}

	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	rec := filepath.Join(dir, "r.cudatap")
	if _, stderr, err := run(t, "record", "-o", rec, "--", b.Workload, "--iters", "5"); err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	full, _ := os.ReadFile(rec)
	cut := filepath.Join(dir, "cut.cudatap")
	os.WriteFile(cut, full[:len(full)*2/3], 0o644)
	out := filepath.Join(dir, "cut.json")
	stdout, stderr, err := run(t, "export", cut, "-o", out)
	if err != nil {
		t.Fatalf("truncated recording should still export: %v", err)
	}
	if !strings.Contains(stderr, "truncated") || !strings.Contains(stdout, "recording truncated (") ||
		!strings.Contains(stdout, "dropped events") {
		t.Errorf("stderr %q / stdout %q", stderr, stdout)
	}
	tr := readChrome(t, out)
	if countLaunches(tr) == 0 {
		t.Errorf("no launches exported from the part before the cut")
	}
	// The trace says it too: in its footer and on the timeline.
	if tr.Cudatap["drops_known"] != false || !strings.Contains(fmt.Sprint(tr.Cudatap["truncated"]), "truncated") {
		t.Errorf("footer of a truncated export: %v", tr.Cudatap)
	}
	marked := false
	for _, e := range tr.TraceEvents {
		marked = marked || (e["ph"] == "i" && e["name"] == "recording truncated")
	}
	if !marked {
		t.Error("no 'recording truncated' instant event")
	}
	// A directory is named as one.
	if _, _, err := run(t, "export", dir, "-o", filepath.Join(dir, "d.json")); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("export of a directory: %v", err)
	}
}

func TestDoctor(t *testing.T) {
	testutil.RequireRoot(t)
	out, _, err := run(t, "doctor")
	if err != nil {
		t.Fatalf("doctor on a machine that traces fine: %v\n%s", err, out)
	}
	for _, want := range []string{"privileges", "BTF", "uprobes", "uprobe_multi"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, err := run(t, "version")
	if err != nil || !strings.HasPrefix(out, "cudatap ") {
		t.Fatalf("version: %q %v", out, err)
	}
}

// TestTopTracesStreams: top -p shows live per-stream lines from the tracer
// (plain lines: stdout is not a terminal).
func TestTopTracesStreams(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	cmd := exec.Command(b.Workload, "--scenario", "basic", "--iters", "4000", "--sleep-ms", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	out, _, err := run(t, "top", "-p", strconv.Itoa(cmd.Process.Pid), "-n", "3", "--interval", "700ms")
	if err != nil {
		t.Fatalf("top: %v\n%s", err, out)
	}
	if !strings.Contains(out, "LAUNCHES/S") || !strings.Contains(out, "stream 0 (legacy default)") {
		t.Errorf("top shows no traced stream:\n%s", out)
	}
}

// TestRecordExitStatus: record exits with the traced command's status, as
// a shell reports it, and says which signal killed it.
func TestRecordExitStatus(t *testing.T) {
	testutil.RequireRoot(t)
	testutil.Sim(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		script string
		code   int
		says   string
	}{
		{"exit 0", 0, ""},
		{"exit 3", 3, ""},
		{"kill -SEGV $$", 139, "killed by SIGSEGV (exit status 139)"},
		{"kill -KILL $$", 137, "killed by SIGKILL (exit status 137)"},
	} {
		_, stderr, err := run(t, "record", "--nvml-interval=-1s", "-o", filepath.Join(dir, "x.pb.gz"), "--", "sh", "-c", tc.script)
		code := 0
		var ee *exitError
		if errors.As(err, &ee) {
			code = ee.code
		} else if err != nil {
			t.Fatalf("%s: %v\n%s", tc.script, err, stderr)
		}
		if code != tc.code || !strings.Contains(stderr, tc.says) {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", tc.script, code, tc.code, stderr)
		}
	}
}

// TestContainerMatchingNothing: --container with an id no process has
// says so, instead of a bare "attached to 0 process(es)".
func TestContainerMatchingNothing(t *testing.T) {
	testutil.RequireRoot(t)
	_, stderr, err := run(t, "record", "--container", "deadbeef0000", "-d", "50ms", "--nvml-interval=-1s", "-o", filepath.Join(t.TempDir(), "c.pb.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, `no process on this host belongs to container "deadbeef0000"`) {
		t.Errorf("stderr:\n%s", stderr)
	}
}

// TestRecordingDiskFull: when the recording cannot be written (its disk
// is full), the trace stops at once, and every other output is written
// from what was modeled; the error names the failed write.
func TestRecordingDiskFull(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.Mkdir(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", small).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", small).Run()
	prof := filepath.Join(dir, "p.pb.gz")
	stdout, stderr, err := run(t, "record", "--nvml-interval=-1s", "-o", filepath.Join(small, "r.cudatap"), "-o", prof,
		"--", b.Workload, "--scenario", "launches", "--iters", "100000000")
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("record onto a full disk: %v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "dropped events") || !strings.Contains(stderr, "wrote "+prof) {
		t.Errorf("stderr:\n%s\nstdout:\n%s", stderr, stdout)
	}
	f, err := os.Open(prof)
	if err != nil {
		t.Fatalf("the profile was not written: %v", err)
	}
	defer f.Close()
	if p, err := profile.Parse(f); err != nil || p.CheckValid() != nil || len(p.Sample) == 0 {
		t.Errorf("profile: %v", err)
	}
}
