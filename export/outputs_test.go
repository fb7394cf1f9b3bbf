package export

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// files lists dir with each file's content.
func files(t *testing.T, dir string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = string(b)
	}
	return out
}

func TestPlanTouchesNothing(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	if err := os.WriteFile(old, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := files(t, dir)
	outs, err := Plan([]string{filepath.Join(dir, "new.json.gz"), old, filepath.Join(dir, "p.pb.gz"), filepath.Join(dir, "r.cudatap"),
		filepath.Join(dir, "t.perfetto-trace"), filepath.Join(dir, "t.pftrace")}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []Format{Chrome, Chrome, Pprof, Recording, Perfetto, Perfetto}
	for i, o := range outs {
		if o.Format != want[i] {
			t.Errorf("%s: format %s, want %s", o.Path, o.Format, want[i])
		}
	}
	if after := files(t, dir); len(after) != len(before) || after["old.json"] != "keep" {
		t.Errorf("Plan changed the directory: %v", after)
	}
}

func TestPlanRefuses(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "run.cudatap")
	if err := os.WriteFile(in, []byte("recording"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.cudatap")
	hard := filepath.Join(dir, "hard.cudatap")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(in, hard); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		paths  []string
		inputs []string
		want   string
	}{
		{"unknown extension", []string{filepath.Join(dir, "x.txt")}, nil, "cannot tell the format"},
		{"missing directory", []string{filepath.Join(dir, "no", "x.json")}, nil, "no such file"},
		{"directory", []string{dir + "/"}, nil, "cannot tell the format"},
		{"directory with --format", []string{dir}, nil, "not a regular file"},
		{"under a file", []string{filepath.Join(in, "x.json")}, nil, "not a directory"},
		{"the input", []string{in}, []string{in}, "is the input"},
		{"a link to the input", []string{link}, []string{in}, "is the input"},
		{"the input through a link", []string{in}, []string{link}, "is the input"},
		{"a hard link to the input", []string{hard}, []string{in}, "is the input"},
		{"the same file twice", []string{filepath.Join(dir, "a.json"), filepath.Join(dir, ".", "a.json")}, nil, "are the same file"},
	} {
		override := ""
		if tc.name == "directory with --format" || strings.Contains(tc.name, "input") {
			override = "cudatap"
		}
		_, err := Plan(tc.paths, override, tc.inputs...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Plan = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	if b, _ := os.ReadFile(in); string(b) != "recording" {
		t.Errorf("the input changed: %q", b)
	}
	if _, err := Plan([]string{filepath.Join(dir, "other.cudatap")}, "", in); err != nil {
		t.Errorf("another output: %v", err)
	}
}

// export writes the fixture to outs as the CLI does: aggregates and
// traces fed by one replay.
func export(t *testing.T, outs []Output) error {
	t.Helper()
	f := fixture.New()
	agg := NewAggregates()
	set, err := CreateChrome(outs, f.Names, Options{Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	f.Feed(model.Sinks{agg.Sink(), set.Sink()})
	return errors.Join(set.Close(f.Result), WritePprof(outs, f.Result, agg))
}

func readTrace(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	var tf map[string]any
	if err := json.Unmarshal(data, &tf); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tf
}

func TestWriteOutputs(t *testing.T) {
	dir := t.TempDir()
	// An existing trace is replaced; one reached through a link is
	// replaced where the link points, and the link stays.
	old := filepath.Join(dir, "old.json")
	real := filepath.Join(dir, "real.pb.gz")
	link := filepath.Join(dir, "link.pb.gz")
	os.WriteFile(old, []byte("old"), 0o600)
	os.WriteFile(real, []byte("old"), 0o600)
	os.Symlink("real.pb.gz", link)
	outs, err := Plan([]string{old, filepath.Join(dir, "t.json.gz"), link, filepath.Join(dir, "t.perfetto-trace")}, "")
	if err != nil {
		t.Fatal(err)
	}
	umask := syscall.Umask(0o077)
	err = export(t, outs)
	syscall.Umask(umask)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"old.json", "t.json.gz"} {
		tf := readTrace(t, filepath.Join(dir, name))
		if evs, _ := tf["traceEvents"].([]any); len(evs) == 0 {
			t.Errorf("%s: no events", name)
		}
	}
	if p := testutil.ReadProfile(t, link); len(p.Sample) == 0 {
		t.Error("no samples")
	}
	// The Perfetto trace, from the same replay: as many slices as the
	// Chrome trace has (and the two Perfetto draws its own way: the
	// recording's slice, the anchor of the event dependency's flow).
	b, _ := os.ReadFile(filepath.Join(dir, "t.perfetto-trace"))
	pt, err := perfettotest.Read(b)
	if err != nil {
		t.Fatalf("the Perfetto trace: %v", err)
	}
	slices := 0
	for _, ev := range readTrace(t, old)["traceEvents"].([]any) {
		if ph := ev.(map[string]any)["ph"]; ph == "X" || ph == "i" {
			slices++
		}
	}
	if len(pt.Slices) != slices+2 || len(pt.Problems) > 0 {
		t.Errorf("the Perfetto trace has %d slices, the Chrome trace %d; problems: %q", len(pt.Slices), slices, pt.Problems)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
	for name := range files(t, dir) {
		fi, _ := os.Stat(filepath.Join(dir, name))
		if strings.HasSuffix(name, ".tmp") {
			t.Errorf("temporary file %s left", name)
		} else if fi.Mode().Perm() != 0o644 {
			t.Errorf("%s: mode %v, want 0644 whatever the umask", name, fi.Mode().Perm())
		}
	}
}

// An output that cannot be written is reported by path, and the others
// are still written.
func TestFailingOutput(t *testing.T) {
	dir := t.TempDir()
	gone := filepath.Join(dir, "gone")
	os.Mkdir(gone, 0o755)
	good := []string{filepath.Join(dir, "t.json"), filepath.Join(dir, "p.pb.gz")}
	bad := []string{filepath.Join(gone, "t.json.gz"), filepath.Join(gone, "p.pb.gz")}
	outs, err := Plan(append(good, bad...), "")
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(gone) // after Plan: the outputs there fail when written
	err = export(t, outs)
	if err == nil {
		t.Fatal("no error")
	}
	for _, p := range bad {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error does not name %s: %v", p, err)
		}
	}
	readTrace(t, good[0])
	testutil.ReadProfile(t, good[1])
	for name := range files(t, dir) {
		if strings.HasSuffix(name, ".tmp") {
			t.Errorf("temporary file %s left", name)
		}
	}
}

// A trace that fails while written is removed, and the target keeps its
// old content.
func TestChromeWriteError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.json")
	os.WriteFile(path, []byte("old"), 0o644)
	outs, err := Plan([]string{path}, "")
	if err != nil {
		t.Fatal(err)
	}
	f := fixture.New()
	set, err := CreateChrome(outs, f.Names, Options{})
	if err != nil {
		t.Fatal(err)
	}
	set.outs[0].t.f.Close() // every write fails from here
	f.Feed(set.Sink())
	if err := set.Close(f.Result); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Close = %v, want an error naming %s", err, path)
	}
	if got := files(t, dir); len(got) != 1 || got["t.json"] != "old" {
		t.Errorf("directory after a failed trace: %v", got)
	}
}

func TestChromeAbort(t *testing.T) {
	dir := t.TempDir()
	outs, err := Plan([]string{filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json.gz")}, "")
	if err != nil {
		t.Fatal(err)
	}
	set, err := CreateChrome(outs, nil, Options{})
	if err != nil || set == nil {
		t.Fatal(set, err)
	}
	set.Abort()
	if got := files(t, dir); len(got) != 0 {
		t.Errorf("files after Abort: %v", got)
	}
	if err := set.Close(&model.Result{}); err != nil {
		t.Errorf("Close after Abort: %v", err)
	}
	// No Chrome output: a nil set that discards.
	none, err := CreateChrome([]Output{{Path: filepath.Join(dir, "p.pb.gz"), Format: Pprof}}, nil, Options{})
	if none != nil || err != nil {
		t.Fatal(none, err)
	}
	if _, ok := none.Sink().(model.Discard); !ok || none.Close(&model.Result{}) != nil {
		t.Error("nil set")
	}
	none.Abort()
}

// TestPlanRefusesForeignLink: a link another user planted where an output
// goes is not written through (as root it could point at any file).
func TestPlanRefusesForeignLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a link to another user: go test -exec sudo ./export/")
	}
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "trace.json")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(link, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := Plan([]string{link}, ""); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Fatalf("Plan through another user's link: %v", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim now %q", b)
	}
}

// TestPlanRefusesForeignDirLink: a directory link another user planted in
// an output's path (review 4c) is refused as the last component's is; a
// link of root's or of this user's is followed.
func TestPlanRefusesForeignDirLink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a link to another user: go test -exec sudo ./export/")
	}
	dir := t.TempDir()
	private := filepath.Join(dir, "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(private, "x.json")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "nobodys")
	if err := os.Symlink(private, foreign); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// Through it, and through a link of root's that leads to it.
	ours := filepath.Join(dir, "ours")
	if err := os.Symlink("nobodys", ours); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(foreign, "x.json"), filepath.Join(ours, "x.json"), filepath.Join(ours, "sub", "..", "x.json")} {
		if _, err := Plan([]string{p}, ""); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("Plan(%s): %v, want a refusal naming the link's owner", p, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("victim now %q", b)
	}
	// Root's own link to the directory is fine.
	rootLink := filepath.Join(dir, "rootlink")
	if err := os.Symlink(private, rootLink); err != nil {
		t.Fatal(err)
	}
	if _, err := Plan([]string{filepath.Join(rootLink, "y.json")}, ""); err != nil {
		t.Errorf("Plan through root's link: %v", err)
	}
}

// A .json.gz is compressed on every core, gzipBlock bytes at a time, into
// one gzip stream: a trace of many blocks reads back whole with the
// standard library.
func TestParallelGzip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "big.json.gz")
	outs, err := Plan([]string{path}, "")
	if err != nil {
		t.Fatal(err)
	}
	f := fixture.New()
	set, err := CreateChrome(outs, f.Names, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, sink := f.Result.Processes[0], set.Sink()
	const launches = 20_000 // about 8 MB of JSON: 8 blocks
	for i := range launches {
		ts := uint64(fixture.Base) + uint64(i)*1000
		c := model.Call{Start: ts, End: ts + 500, TID: fixture.TIDMain, API: event.CudaLaunchKernel, Stream: 2, GPUOp: i, Correlation: uint64(i + 1),
			Stack: -1, PyStack: -1, HasRet: true, Args: event.Args{HasStream: true, Func: fixture.StubVecAdd}}
		sink.Call(p, &c)
	}
	if err := set.Close(f.Result); err != nil {
		t.Fatal(err)
	}
	var launched int
	for _, ev := range readTrace(t, path)["traceEvents"].([]any) {
		if ev.(map[string]any)["name"] == "cudaLaunchKernel" {
			launched++
		}
	}
	if launched != launches {
		t.Errorf("%d launch slices read back, %d written", launched, launches)
	}
}
