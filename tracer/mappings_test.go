package tracer

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/replay"
)

// mappedRun is a traced run of a simulated workload that waits before it
// exits: its memory map read then, its recording, and the profile
// aggregates of the session.
type mappedRun struct {
	out  *Outcome
	pid  int
	maps []objfile.Mapping // /proc/PID/maps once the work was done and seen
	rec  []byte
	agg  *export.Aggregates
	col  *model.Collector
}

// runMapped launches args (a simulated workload, given --wait-before-exit)
// with stacks on every call, lets it exit once the session has seen syncs
// synchronizations, and reads its memory map before that.
func runMapped(t *testing.T, syncs int64, args ...string) *mappedRun {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	seen := make(chan struct{})
	var rec bytes.Buffer
	r := &mappedRun{agg: export.NewAggregates(), col: model.NewCollector()}
	cfg := Config{Command: append(args, "--wait-before-exit"), Stacks: probe.StacksAll, Stdin: inR, Stdout: outW,
		Stderr: os.Stderr, Duration: time.Minute, NVMLInterval: -1, Recording: &rec, Sink: model.Sinks{r.agg.Sink(), r.col}}
	onLive := func(snapshot func() []model.StreamSnap) {
		go func() {
			defer close(seen)
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				var n int64
				for _, st := range snapshot() {
					n += st.Syncs
				}
				if n >= syncs {
					return
				}
			}
		}()
	}
	cfg.Observer = Funcs{OnLive: onLive}
	type result struct {
		out *Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := Run(context.Background(), cfg)
		outW.Close()
		done <- result{out, err}
	}()
	br := bufio.NewReader(outR)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("the workload ended before its done line: %v (session: %v)", err, (<-done).err)
		}
		if _, err := fmt.Sscanf(line, "done %d", &r.pid); err == nil {
			break
		}
	}
	<-seen
	var err error
	if r.maps, err = objfile.ReadMaps(r.pid); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(inW, "exit")
	inW.Close()
	io.Copy(io.Discard, br)
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	if res.out.ExitCode != 0 {
		t.Fatalf("%v exited %d", args, res.out.ExitCode)
	}
	r.out, r.rec = res.out, rec.Bytes()
	return r
}

// buildID reads the GNU build ID of an ELF file as readelf -n prints it.
func buildID(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		data, err := s.Data()
		if err != nil {
			t.Fatal(err)
		}
		for len(data) >= 12 {
			namesz, descsz, typ := binary.LittleEndian.Uint32(data), binary.LittleEndian.Uint32(data[4:]), binary.LittleEndian.Uint32(data[8:])
			name := 12 + (int(namesz)+3)&^3
			end := name + (int(descsz)+3)&^3
			if end > len(data) {
				break
			}
			if typ == 3 /* NT_GNU_BUILD_ID */ && string(data[12:12+namesz]) == "GNU\x00" {
				return hex.EncodeToString(data[name : name+int(descsz)])
			}
			data = data[end:]
		}
	}
	return ""
}

// TestMappings: the session records, for a simulated workload's stacks,
// one mapping record per mapping its frames lie in: each as /proc/PID/maps
// shows it while the process lives, with its file's build ID; the live
// names and the recording's agree; the profiles made from both (record
// and export) carry those exact mappings, and go tool pprof reads them
// without a warning.
func TestMappings(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	// basic, 20 iterations: a pageable copy (a sync) in each.
	r := runMapped(t, 20, b.Workload, "--scenario", "basic", "--iters", "20")
	pid := uint32(r.pid)
	live := r.out.Result.Names

	rp, err := replay.ReadNames(bytes.NewReader(r.rec))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(rp.Names.Mappings, live.Mappings) {
		t.Errorf("recorded mappings %v, the session's %v", rp.Names.Mappings, live.Mappings)
	}
	if n, want := countRecords(t, r.rec, 12), len(rp.Names.Mappings); n != want {
		t.Errorf("%d mapping records for %d mappings: one each wanted", n, want)
	}

	got := live.MappingsOf(pid)
	files := map[string]model.Mapping{}
	for _, m := range got {
		i := slices.IndexFunc(r.maps, func(pm objfile.Mapping) bool { return pm.Start == m.Start })
		if i < 0 {
			t.Errorf("mapping %+v: not in /proc/%d/maps", m, pid)
			continue
		}
		pm := r.maps[i]
		if m.Limit != pm.End || m.Offset != pm.Offset || m.File != pm.Path || !pm.Exec() {
			t.Errorf("mapping %+v, /proc/%d/maps has %+v", m, pid, pm)
		}
		if id := buildID(t, pm.Path); m.BuildID != id {
			t.Errorf("%s: build ID %q, the file has %q", m.File, m.BuildID, id)
		}
		files[m.File] = m
	}
	for _, f := range []string{b.Workload, b.Runtime, b.Driver} {
		if m, ok := files[f]; !ok || m.BuildID == "" {
			t.Errorf("no mapping of %s with a build ID among %v", f, got)
		}
	}

	// Every named frame lies in a recorded mapping of the object it names.
	var p *model.Process
	for _, q := range r.out.Result.Processes {
		if q.PID == pid {
			p = q
		}
	}
	if p == nil || len(p.Stacks) == 0 {
		t.Fatal("no stacks traced")
	}
	for _, st := range p.Stacks {
		for i, pc := range st {
			name := live.Frame(pid, pc)
			if name == "" {
				continue
			}
			// A return address is named by the call before it; the first
			// frame of a stack taken at a probed function's entry by itself.
			in := func(a uint64) bool {
				j := slices.IndexFunc(got, func(m model.Mapping) bool { return m.Start <= a && a < m.Limit })
				return j >= 0 && strings.HasSuffix(name, "("+filepath.Base(got[j].File)+")")
			}
			if !in(pc-1) && !(i == 0 && in(pc)) {
				t.Errorf("frame %#x %q: not in a recorded mapping of its object", pc, name)
			}
		}
	}

	// A stack taken at a probed function's entry starts in that function,
	// named by its own address; one taken at the return starts at the
	// return address in the caller.
	entries, returns := 0, 0
	for _, c := range r.col.Traces[pid].Calls {
		if c.Stack < 0 {
			continue
		}
		leaf := live.Frame(pid, p.Stacks[c.Stack][0])
		if c.HasRet {
			returns++
			if strings.HasPrefix(leaf, c.SymbolName()+" ") {
				t.Errorf("%s probed at its return: first frame %q", c.SymbolName(), leaf)
			}
			continue
		}
		entries++
		if !strings.HasPrefix(leaf, c.SymbolName()+" (") {
			t.Errorf("%s probed at its entry: first frame %q", c.SymbolName(), leaf)
		}
	}
	if entries == 0 || returns == 0 {
		t.Errorf("%d calls with stacks taken at their entry, %d at their return: want some of each", entries, returns)
	}

	// The profile record writes (live names) and the one export writes
	// (the recording's) carry the exact mappings.
	dir := t.TempDir()
	recorded := filepath.Join(dir, "record.pb.gz")
	if err := export.WritePprof([]export.Output{{Path: recorded, Format: export.Pprof}}, r.out.Result, r.agg); err != nil {
		t.Fatal(err)
	}
	agg := export.NewAggregates()
	res, _, err := replay.Load(bytes.NewReader(r.rec), func(*replay.Replay) model.Sink { return agg.Sink() }, nil)
	if err != nil {
		t.Fatal(err)
	}
	exported := filepath.Join(dir, "export.pb.gz")
	if err := export.WritePprof([]export.Output{{Path: exported, Format: export.Pprof}}, res, agg); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{recorded, exported} {
		prof := testutil.ReadProfile(t, file)
		byFile := map[string]*profile.Mapping{}
		for _, m := range prof.Mapping {
			byFile[m.File] = m
		}
		for _, f := range []string{b.Workload, b.Runtime, b.Driver} {
			pm, want := byFile[f], files[f]
			if pm == nil || pm.Start != want.Start || pm.Limit != want.Limit || pm.Offset != want.Offset || pm.BuildID != want.BuildID {
				t.Errorf("%s: mapping of %s is %+v, want %+v", filepath.Base(file), f, pm, want)
			}
		}
		if prof.Mapping[0].File != b.Workload {
			t.Errorf("%s: first mapping %s, want the program", filepath.Base(file), prof.Mapping[0].File)
		}
		for _, l := range prof.Location {
			if l.Address != 0 && (l.Mapping == nil || l.Address < l.Mapping.Start || l.Address >= l.Mapping.Limit) {
				t.Errorf("%s: location %#x outside its mapping %v", filepath.Base(file), l.Address, l.Mapping)
			}
		}
		for _, c := range prof.Comments {
			if strings.Contains(c, "inferred") {
				t.Errorf("%s: %q", filepath.Base(file), c)
			}
		}
		pprofRaw(t, file)
	}
}

// countRecords counts the records of type typ in a recording.
func countRecords(t *testing.T, b []byte, typ byte) int {
	t.Helper()
	off := 16 + int(binary.LittleEndian.Uint32(b[12:]))
	n := 0
	for off < len(b) {
		size, k := binary.Uvarint(b[off+1:])
		if b[off] == typ {
			n++
		}
		off += 1 + k + int(size)
	}
	return n
}

// pprofRaw runs go tool pprof -raw on file and fails on anything it
// prints on stderr.
func pprofRaw(t *testing.T, file string) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Log("go is not on PATH: go tool pprof not run")
		return
	}
	cmd := exec.Command(goTool, "tool", "pprof", "-raw", file)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go tool pprof -raw %s: %v\n%s", file, err, stderr.String())
	}
	if stderr.Len() != 0 {
		t.Errorf("go tool pprof -raw %s warns:\n%s", file, stderr.String())
	}
}

// callEnd is a program whose function ends_in_call ends with a call, so
// that the return address it leaves on the stack is the first instruction
// of the next function, after_call. It syncs the legacy stream below that
// call, prints "done PID" and exits at a line on stdin.
const callEnd = `
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int cudaStreamSynchronize(void *stream);

__attribute__((noinline, noreturn)) void sync_then_wait(void)
{
	cudaStreamSynchronize(0);
	printf("done %d\n", (int)getpid());
	fflush(stdout);
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		exit(1);
	exit(0);
}

__asm__(".text\n"
	".globl ends_in_call\n.type ends_in_call,@function\nends_in_call:\n"
	".cfi_startproc\n"
	"push %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset %rbp, -16\n"
	"mov %rsp, %rbp\n.cfi_def_cfa_register %rbp\n"
	"call sync_then_wait\n"
	".cfi_endproc\n.size ends_in_call, .-ends_in_call\n"
	".globl after_call\n.type after_call,@function\nafter_call:\nret\n.size after_call, .-after_call\n");

void ends_in_call(void);

int main(void)
{
	ends_in_call();
}
`

// TestReturnAddressNamed: a return address is named by the call before it:
// a call that ends its function returns to the next one, and the frame
// still names the function that made the call.
func TestReturnAddressNamed(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	cc := testutil.Compiler(t, "cc")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "callend.c"), []byte(callEnd), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "callend")
	if err := testutil.Run(dir, cc, "-O2", "-fno-omit-frame-pointer", "-o", exe, "callend.c",
		"-L"+b.Dir, "-l:"+filepath.Base(b.Runtime), "-Wl,-rpath,"+b.Dir); err != nil {
		t.Fatal(err)
	}
	r := runMapped(t, 1, exe)
	pid := uint32(r.pid)
	var p *model.Process
	for _, q := range r.out.Result.Processes {
		if q.PID == pid {
			p = q
		}
	}
	tr := r.col.Traces[pid]
	if p == nil || tr == nil {
		t.Fatal("the program was not traced")
	}
	n := 0
	for _, c := range tr.Calls {
		if c.SymbolName() != "cudaStreamSynchronize" {
			continue
		}
		n++
		var frames []string
		if c.Stack >= 0 {
			for _, pc := range p.Stacks[c.Stack] {
				frames = append(frames, r.out.Result.Names.Frame(pid, pc))
			}
		}
		if len(frames) < 3 || !strings.HasPrefix(frames[0], "sync_then_wait (") || !strings.HasPrefix(frames[1], "ends_in_call (") ||
			!strings.HasPrefix(frames[2], "main (") {
			t.Errorf("stack of the sync: %q, want sync_then_wait, ends_in_call, main", frames)
		}
	}
	if n != 1 {
		t.Errorf("%d syncs traced, want 1", n)
	}
}
