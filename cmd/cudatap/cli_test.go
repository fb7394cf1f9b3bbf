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
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/spf13/cobra"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/guard"
	"github.com/cudatap/cudatap/tracer/nvml/nvmlmock"
)

func TestMain(m *testing.M) {
	guard.Init() // the test binary is its sessions' guardian and launcher too
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
	t.Parallel()
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
	if exitCode(err) != exitPartial || err.Error() != "exit status 6" {
		t.Fatalf("a truncated recording exports, with exit status 6 (partial) and nothing more printed: %v", err)
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
	// Every command that reads a recording exits 6 on a cut one.
	for _, args := range [][]string{{"syncs", cut}, {"lint", cut}, {"report", cut}, {"merge", cut, "-o", filepath.Join(dir, "merged.json")}} {
		if _, stderr, err := run(t, args...); exitCode(err) != exitPartial || !strings.Contains(stderr, "truncated") {
			t.Errorf("%v on a cut recording: %v (exit %d), stderr %q; want exit 6 and a warning", args, err, exitCode(err), stderr)
		}
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
	cmd := exec.Command(b.Workload, "--scenario", "basic", "--iters", "40000", "--sleep-ms", "50")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	// Frames from the attach on; on a host loaded by other test runs the
	// reader can lag the first second or two: 8 frames, launches every
	// 50 ms (3 frames of 700 ms once ended before a stream was seen).
	out, _, err := run(t, "top", "-p", strconv.Itoa(cmd.Process.Pid), "-n", "8", "--interval", "500ms")
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
	t.Parallel()
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
	// Lazily: the guardian that would have put the recording in place can
	// still hold it open for a moment after record returns ("device or
	// resource busy" failed TempDir's removal once); the tmpfs goes when it
	// lets go.
	defer exec.Command("umount", "-l", small).Run()
	prof := filepath.Join(dir, "p.pb.gz")
	stdout, stderr, err := run(t, "record", "--nvml-interval=-1s", "-o", filepath.Join(small, "r.cudatap"), "-o", prof,
		"--", b.Workload, "--scenario", "launches", "--iters", "100000000")
	if err == nil || !strings.Contains(err.Error(), "no space left on device") || exitCode(err) != exitPartial {
		t.Fatalf("record onto a full disk: %v (exit status %d, want 6)\n%s", err, exitCode(err), stderr)
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

// TestExitStatuses: each class of failure has its exit status (docs/cli.md,
// "Exit codes"), computed from the error as main does.
func TestExitStatuses(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "x.cudatap")
	os.WriteFile(rec, []byte("not a recording"), 0o644)
	cases := []struct {
		args []string
		code int
	}{
		{[]string{"recrod"}, exitUsage},
		{[]string{"record", "--no-such-flag"}, exitUsage},
		{[]string{"record"}, exitUsage}, // nothing to trace
		{[]string{"record", "-p", "1", "--stacks", "some"}, exitUsage},
		{[]string{"record", "-p", "1", "-o", filepath.Join(dir, "t.txt")}, exitUsage},
		{[]string{"record", "-p", "1", "-o", "-"}, exitUsage},                                  // no --format
		{[]string{"record", "-p", "1", "--format", "chrome", "-o", "-", "-o", "-"}, exitUsage}, // stdout twice
		{[]string{"export"}, exitUsage},                                                        // no recording
		{[]string{"export", rec, "-o", filepath.Join(dir, "y.cudatap")}, exitUsage},            // export makes no recording
		{[]string{"record", "-p", "1073741824"}, exitNotFound},                                 // no such process
		{[]string{"syncs", "-p", "1073741824"}, exitNotFound},
		{[]string{"top", "-p", "1073741824", "-n", "1"}, exitNotFound},
		{[]string{"record", "-o", filepath.Join(dir, "p.pb.gz"), "--", "/no/such/command"}, exitNotFound}, // nothing to launch
		{[]string{"record", "-o", filepath.Join(dir, "p.pb.gz"), "--", "no-such-command-on-path"}, exitNotFound},
		{[]string{"export", filepath.Join(dir, "missing.cudatap"), "-o", filepath.Join(dir, "m.json")}, exitNotFound},
		{[]string{"export", rec, "-o", filepath.Join(dir, "g.json")}, exitFailure}, // not a recording
	}
	for _, c := range cases {
		_, _, err := run(t, c.args...)
		if got := exitCode(err); got != c.code {
			t.Errorf("%v: exit status %d, want %d (%v)", c.args, got, c.code, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "y.cudatap")); err == nil {
		t.Error("a refused export wrote its output")
	}

	// A process without CUDA (root: the probes load before discovery).
	testutil.RequireRoot(t)
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleep.Process.Kill(); sleep.Wait() }()
	_, _, err := run(t, "record", "--nvml-interval=-1s", "-p", strconv.Itoa(sleep.Process.Pid), "-o", filepath.Join(dir, "s.pb.gz"))
	if got := exitCode(err); got != exitNoCUDA || !strings.Contains(err.Error(), "no CUDA") {
		t.Errorf("record -p <sleep>: exit status %d, want %d (%v)", got, exitNoCUDA, err)
	}
	// doctor: the first failure's status.
	out, _, err := run(t, "doctor", "-p", "1073741824", "-p", strconv.Itoa(sleep.Process.Pid))
	if got := exitCode(err); got != exitNotFound || !strings.Contains(out, "[FAIL] CUDA libraries") || !strings.Contains(out, "[FAIL] discover") {
		t.Errorf("doctor -p <none> -p <sleep>: exit status %d, want %d (%v)\n%s", got, exitNotFound, err, out)
	}
}

// TestExitStatusesAsProcess runs the cudatap binary: main's exit path, and
// as an unprivileged user (nobody), exit status 3.
func TestExitStatusesAsProcess(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("needs setpriv (util-linux) to run cudatap as nobody")
	}
	// Where nobody may run it from.
	dir, err := os.MkdirTemp("", "cudatap-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "cudatap")
	if b, err := os.ReadFile(buildCudatap(t)); err != nil || os.WriteFile(bin, b, 0o755) != nil {
		t.Fatalf("copy cudatap: %v", err)
	}
	status := func(asNobody bool, args ...string) (int, string) {
		cmd := exec.Command(bin, args...)
		if asNobody {
			cmd = exec.Command(setpriv, append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", bin}, args...)...)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		cmd.Run()
		return cmd.ProcessState.ExitCode(), stderr.String()
	}
	for _, c := range []struct {
		nobody bool
		args   []string
		code   int
		says   string
	}{
		{false, []string{"--version"}, 0, ""},
		{false, []string{"recrod"}, exitUsage, `did you mean "record"?`},
		{false, []string{"record", "-p", "1073741824"}, exitNotFound, "does not exist"},
		{true, []string{"record", "-p", "1"}, exitPermission, "insufficient privileges"},
		{true, []string{"record", "--", "true"}, exitPermission, "insufficient privileges"},
		{true, []string{"doctor"}, exitPermission, "check(s) failed"},
	} {
		code, stderr := status(c.nobody, c.args...)
		if code != c.code || !strings.Contains(stderr, c.says) || strings.Count(stderr, "cudatap:") > 1 {
			t.Errorf("%v (nobody: %v): exit status %d, want %d; stderr:\n%s", c.args, c.nobody, code, c.code, stderr)
		}
	}
}

// TestStdoutOutputs: -o - streams the trace or the profile to stdout, and
// the summary goes to stderr; record and export alike.
func TestStdoutOutputs(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	spills := t.TempDir() // the spill file of a trace on stdout goes to $TMPDIR
	t.Setenv("TMPDIR", spills)
	rec := filepath.Join(dir, "r.cudatap")
	workload := []string{"--", b.Workload, "--scenario", "basic", "--iters", "20"}
	stdout, stderr, err := run(t, append([]string{"record", "--nvml-interval=-1s", "-o", "-", "--format", "chrome"}, workload...)...)
	if err != nil {
		t.Fatalf("record -o -: %v\n%s", err, stderr)
	}
	var tr chromeTrace
	if err := json.Unmarshal([]byte(stdout), &tr); err != nil {
		t.Fatalf("stdout is not a Chrome trace: %v\n%.300s", err, stdout)
	}
	if n := countLaunches(tr); n != 60 {
		t.Errorf("trace on stdout has %d launch slices, want 60", n)
	}
	if !strings.Contains(stderr, "cudatap summary:") || !strings.Contains(stderr, "wrote the chrome output to stdout") {
		t.Errorf("the summary is not on stderr:\n%s", stderr)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Error("a file named - was written")
	}
	if ents, _ := os.ReadDir(spills); len(ents) > 0 {
		t.Errorf("spill files left in $TMPDIR: %v", ents)
	}

	stdout, stderr, err = run(t, append([]string{"record", "--nvml-interval=-1s", "-o", "-", "--format", "pprof", "-o", rec}, workload...)...)
	if err != nil {
		t.Fatalf("record -o - --format pprof: %v\n%s", err, stderr)
	}
	p, err := profile.Parse(strings.NewReader(stdout))
	if err != nil || p.CheckValid() != nil || len(p.Sample) == 0 {
		t.Fatalf("stdout is not a pprof profile: %v", err)
	}
	if !strings.Contains(stderr, "cudatap summary:") {
		t.Errorf("the summary is not on stderr:\n%s", stderr)
	}
	if _, err := os.Stat(rec); err != nil {
		t.Fatalf("the file output beside -o -: %v", err)
	}

	// export: the same trace from the recording, on stdout.
	stdout, stderr, err = run(t, "export", rec, "-o", "-", "--format", "chrome")
	if err != nil {
		t.Fatalf("export -o -: %v\n%s", err, stderr)
	}
	var exported chromeTrace
	if err := json.Unmarshal([]byte(stdout), &exported); err != nil || countLaunches(exported) != 60 {
		t.Errorf("export -o -: %v, %d launches", err, countLaunches(exported))
	}
	if !strings.Contains(stderr, "cudatap summary:") {
		t.Errorf("export's summary is not on stderr:\n%s", stderr)
	}
	stdout, _, err = run(t, "export", rec, "-o", "-", "--format", "pprof")
	if p, perr := profile.Parse(strings.NewReader(stdout)); err != nil || perr != nil || p.CheckValid() != nil {
		t.Errorf("export -o - --format pprof: %v %v", err, perr)
	}

	// A recording to stdout, live: it exports like a file.
	stdout, stderr, err = run(t, append([]string{"record", "--nvml-interval=-1s", "-o", "-", "--format", "cudatap"}, workload...)...)
	if err != nil {
		t.Fatalf("record -o - --format cudatap: %v\n%s", err, stderr)
	}
	piped := filepath.Join(dir, "piped.cudatap")
	os.WriteFile(piped, []byte(stdout), 0o644)
	if _, stderr, err := run(t, "export", piped, "-o", filepath.Join(dir, "p.json")); err != nil {
		t.Errorf("export of a recording written to stdout: %v\n%s", err, stderr)
	} else if n := countLaunches(readChrome(t, filepath.Join(dir, "p.json"))); n != 60 {
		t.Errorf("recording from stdout: %d launches, want 60", n)
	}
}

// TestQuiet: --quiet prints nothing on success, on stdout or stderr.
func TestQuiet(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	dir := t.TempDir()
	rec := filepath.Join(dir, "r.cudatap")
	stdout, stderr, err := run(t, "record", "-q", "--nvml-interval=-1s", "-o", rec, "-o", filepath.Join(dir, "t.json"),
		"--", b.Workload, "--scenario", "basic", "--iters", "10")
	if err != nil || stdout != "" || stderr != "" {
		t.Errorf("record -q: %v; stdout %q; stderr %q", err, stdout, stderr)
	}
	stdout, stderr, err = run(t, "--quiet", "export", rec, "-o", filepath.Join(dir, "e.json"), "-o", filepath.Join(dir, "e.pb.gz"))
	if err != nil || stdout != "" || stderr != "" {
		t.Errorf("export --quiet: %v; stdout %q; stderr %q", err, stdout, stderr)
	}
	// Errors still show.
	if _, _, err := run(t, "-q", "export", filepath.Join(dir, "missing.cudatap"), "-o", filepath.Join(dir, "m.json")); err == nil {
		t.Error("export -q of a missing recording succeeded")
	}
}

// summary is the --json summary, as far as the tests read it.
type summary struct {
	Schema    int `json:"schema"`
	Processes []struct {
		PID     uint32 `json:"pid"`
		Calls   int64  `json:"calls"`
		Streams []struct {
			ID       int   `json:"id"`
			Launches int64 `json:"launches"`
		} `json:"streams"`
	} `json:"processes"`
	Sites      []map[string]any `json:"sites"`
	Lints      []map[string]any `json:"lints"`
	Stragglers []map[string]any `json:"stragglers"`
	Drops      map[string]any   `json:"drops"`
	Lost       *uint64          `json:"lost_events"`
	Outputs    []struct {
		Path, Format string
	} `json:"outputs"`
	Command *struct {
		ExitCode int  `json:"exit_code"`
		Stopped  bool `json:"stopped"`
	} `json:"command"`
}

// TestJSONOutputs: --json of record, export, doctor, gpus and version is
// one JSON document on stdout.
func TestJSONOutputs(t *testing.T) {
	stdout, _, err := run(t, "version", "--json")
	var v buildInfo
	if err != nil || json.Unmarshal([]byte(stdout), &v) != nil || v.Version == "" || v.RecordingFormat == 0 || v.Go == "" {
		t.Errorf("version --json: %v %q", err, stdout)
	}

	// gpus --json on a simulated NVML: two H200s, a process on one.
	srv := nvmlmock.NewH200(2)
	srv.Devices[1].Procs = []nvmlmock.Proc{{PID: 4123, MemUsed: 1 << 30, SMUtil: 50}}
	gpus := newGPUsCmd(&globalOptions{}, srv)
	var out bytes.Buffer
	gpus.SetOut(&out)
	gpus.SetArgs([]string{"--json"})
	if err := gpus.Execute(); err != nil {
		t.Fatal(err)
	}
	var g gpusJSON
	if err := json.Unmarshal(out.Bytes(), &g); err != nil || g.Driver == "" || len(g.GPUs) != 2 || g.GPUs[1].Name != "NVIDIA H200" || g.GPUs[0].MemTotalBytes == 0 {
		t.Errorf("gpus --json: %v\n%s", err, out.String())
	}
	if len(g.Processes) != 1 || g.Processes[0].PID != 4123 || g.Processes[0].GPU != 1 || g.Processes[0].MemUsedBytes != 1<<30 {
		t.Errorf("gpus --json processes: %+v", g.Processes)
	}

	testutil.RequireRoot(t)
	stdout, _, err = run(t, "doctor", "--json")
	var d doctorReport
	if err != nil || json.Unmarshal([]byte(stdout), &d) != nil || !d.OK || len(d.Checks) < 3 || d.Kernel == "" {
		t.Errorf("doctor --json: %v\n%s", err, stdout)
	}

	b := testutil.Sim(t)
	dir := t.TempDir()
	rec := filepath.Join(dir, "r.cudatap")
	stdout, stderr, err := run(t, "record", "--json", "--nvml-interval=-1s", "-o", rec, "--", b.Workload, "--scenario", "basic", "--iters", "20")
	if err != nil {
		t.Fatalf("record --json: %v\n%s", err, stderr)
	}
	var live summary
	if err := json.Unmarshal([]byte(stdout), &live); err != nil {
		t.Fatalf("record --json: %v\n%s", err, stdout)
	}
	launches := int64(0)
	for _, p := range live.Processes {
		for _, s := range p.Streams {
			launches += s.Launches
		}
	}
	if live.Schema != summarySchema || len(live.Processes) != 1 || launches != 60 || live.Lost == nil || *live.Lost != 0 ||
		live.Drops == nil || len(live.Sites) == 0 || live.Command == nil || live.Command.ExitCode != 0 ||
		len(live.Outputs) != 1 || live.Outputs[0].Format != "cudatap" {
		t.Errorf("record --json summary:\n%s", stdout)
	}
	// export --json: the same summary, less the command; also with -q.
	stdout, stderr, err = run(t, "export", "-q", "--json", rec)
	var replayed summary
	if err != nil || stderr != "" || json.Unmarshal([]byte(stdout), &replayed) != nil {
		t.Fatalf("export -q --json: %v\n%s\n%s", err, stdout, stderr)
	}
	if replayed.Command != nil || len(replayed.Processes) != 1 || replayed.Processes[0].Calls != live.Processes[0].Calls || len(replayed.Sites) != len(live.Sites) {
		t.Errorf("export --json differs from record's:\n%s", stdout)
	}
	// The basic scenario's lints (a cross-stream race and pageable copies
	// in its loop, for real: export/lint's tests), the same live and
	// replayed; no NCCL, no stragglers.
	ids := func(s summary) []string {
		var out []string
		for _, f := range s.Lints {
			out = append(out, fmt.Sprint(f["id"]))
		}
		slices.Sort(out)
		return out
	}
	if got := ids(live); !slices.Equal(got, []string{"cross-stream-race", "pageable-copy-loop"}) || !slices.Equal(ids(replayed), got) || live.Stragglers == nil || len(live.Stragglers) != 0 {
		t.Errorf("lints live %v, replayed %v, stragglers %v: want the basic scenario's two lints both times, and no stragglers", got, ids(replayed), live.Stragglers)
	}
}

// TestVersionFlag: --version prints what `cudatap version` does.
func TestVersionFlag(t *testing.T) {
	flag, _, err := run(t, "--version")
	cmd, _, err2 := run(t, "version")
	if err != nil || err2 != nil || flag != cmd || !strings.HasPrefix(flag, "cudatap ") || !strings.Contains(flag, "recording format v") {
		t.Errorf("--version %q (%v), version %q (%v)", flag, err, cmd, err2)
	}
}

// TestCompletions: the shell completions offer values, through cobra's
// __complete (what the completion scripts call).
func TestCompletions(t *testing.T) {
	complete := func(args ...string) (values []string, directive string) {
		t.Helper()
		out, _, err := run(t, append([]string{"__complete"}, args...)...)
		if err != nil {
			t.Fatalf("__complete %v: %v", args, err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(line, ":") {
				directive = line
				continue
			}
			values = append(values, strings.Split(line, "\t")[0])
		}
		return values, directive
	}
	if v, _ := complete("record", "--stacks", ""); strings.Join(v, " ") != "none sync all" {
		t.Errorf("record --stacks: %v", v)
	}
	if v, _ := complete("record", "--format", ""); strings.Join(v, " ") != "chrome perfetto pprof cudatap" {
		t.Errorf("record --format: %v", v)
	}
	if v, _ := complete("export", "--format", ""); strings.Join(v, " ") != "chrome perfetto pprof" {
		t.Errorf("export --format: %v", v)
	}
	// Files, .cudatap ones: the extension and ShellCompDirectiveFilterFileExt.
	if v, d := complete("export", ""); strings.Join(v, " ") != "cudatap" || d != fmt.Sprintf(":%d", cobra.ShellCompDirectiveFilterFileExt) {
		t.Errorf("export: %v %s", v, d)
	}

	// -p: the processes that map CUDA, not the others.
	b := testutil.Sim(t)
	cuda := exec.Command(b.Workload, "--wait-stdin", "--iters", "1")
	in, err := cuda.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cuda.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cuda.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { in.Write([]byte("go\n")); in.Close(); cuda.Wait() }()
	ready := make([]byte, 1) // the workload says "ready" once its libraries are loaded
	if _, err := out.Read(ready); err != nil {
		t.Fatal(err)
	}
	v, _ := complete("record", "-p", "")
	if !slices.Contains(v, strconv.Itoa(cuda.Process.Pid)) || slices.Contains(v, strconv.Itoa(os.Getpid())) {
		t.Errorf("record -p offers %v; want the CUDA workload %d and not this test", v, cuda.Process.Pid)
	}
}

// TestChromeSizeWarning: a Chrome trace estimated very large is warned
// about, with what makes it smaller; a small one and other formats not.
func TestChromeSizeWarning(t *testing.T) {
	chrome := []export.Output{{Path: "t.json", Format: export.Chrome}}
	var w bytes.Buffer
	warnChromeSize(&w, chrome, 2_000_000, true)
	if !strings.Contains(w.String(), "warning: the Chrome trace will be about 1.6 GiB") || !strings.Contains(w.String(), "--duration") {
		t.Errorf("warning: %q", w.String())
	}
	w.Reset()
	warnChromeSize(&w, chrome, 10_000, true)
	warnChromeSize(&w, []export.Output{{Path: "p.pb.gz", Format: export.Pprof}}, 2_000_000, true)
	if w.Len() != 0 {
		t.Errorf("warned: %q", w.String())
	}
}
