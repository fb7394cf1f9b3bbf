package pprofout

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/tracer/event"
)

// roundTrip collects the fixture's calls, writes their profile and parses
// it back.
func roundTrip(t *testing.T, f *fixture.Fixture, opts Options) *profile.Profile {
	t.Helper()
	c := NewCollector()
	f.Feed(c)
	var buf bytes.Buffer
	if err := Write(&buf, f.Result, c, opts); err != nil {
		t.Fatal(err)
	}
	if magic := buf.Bytes()[:2]; magic[0] != 0x1f || magic[1] != 0x8b {
		t.Fatalf("not gzip: %x", magic)
	}
	back, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.CheckValid(); err != nil {
		t.Fatal(err)
	}
	return back
}

func valueIndex(t *testing.T, p *profile.Profile, typ string) int {
	t.Helper()
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i
		}
	}
	t.Fatalf("no sample type %q", typ)
	return -1
}

func total(t *testing.T, p *profile.Profile, typ string) int64 {
	t.Helper()
	i := valueIndex(t, p, typ)
	var sum int64
	for _, s := range p.Sample {
		sum += s.Value[i]
	}
	return sum
}

// leaf names a sample's stack, leaf first.
func names(s *profile.Sample) []string {
	var out []string
	for _, l := range s.Location {
		for _, ln := range l.Line {
			out = append(out, ln.Function.Name)
		}
	}
	return out
}

func TestTotals(t *testing.T) {
	f := fixture.New()
	r := f.Result
	p := roundTrip(t, f, Options{})

	var calls, dur, blocked, copied, launches int64
	for _, tr := range f.Traces {
		for _, c := range tr.Calls {
			calls++
			dur += int64(c.Duration())
			switch c.Spec().Class {
			case event.ClassMemcpy:
				copied += int64(c.Args.Bytes)
			case event.ClassLaunch:
				launches++
			}
		}
		for _, s := range tr.Syncs {
			blocked += int64(s.BlockedNs)
		}
	}
	for typ, want := range map[string]int64{"cuda_api": calls, "cuda_api_time": dur, "sync_wait": blocked, "memcpy": copied, "launches": launches} {
		if got := total(t, p, typ); got != want {
			t.Errorf("%s total %d, want %d", typ, got, want)
		}
	}
	if p.DefaultSampleType != "sync_wait" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}
	if p.TimeNanos != int64(r.Start)+r.WallOffsetNs || p.DurationNanos != int64(r.End-r.Start) {
		t.Errorf("time %d duration %d", p.TimeNanos, p.DurationNanos)
	}
	want := "cudatap: " + describe.Account(r)
	if len(p.Comments) == 0 || p.Comments[0] != want || !strings.Contains(want, "dropped events: 0 (") {
		t.Errorf("comments %q", p.Comments)
	}
}

func TestStacksAndLabels(t *testing.T) {
	p := roundTrip(t, fixture.New(), Options{DefaultSampleType: "cuda_api_time"})
	if p.DefaultSampleType != "cuda_api_time" {
		t.Errorf("default sample type %q", p.DefaultSampleType)
	}

	var launchA, pageable, devSync *profile.Sample
	for _, s := range p.Sample {
		for _, k := range []string{"cuda_api", "cuda_stream", "pid"} {
			if len(s.Label[k]) != 1 {
				t.Errorf("sample %v: label %s = %q", names(s), k, s.Label[k])
			}
		}
		st := names(s)
		for _, v := range s.Label {
			for _, n := range v {
				if strings.Contains(n, "vecAdd") || strings.HasPrefix(n, "kernel@") {
					t.Errorf("kernel name %q used as a label value", n)
				}
			}
		}
		switch {
		case st[0] == "vecAdd" && s.Label["pid"][0] == "4123" && s.Label["cuda_stream"][0] == "2":
			launchA = s
		case st[0] == "cudaMemcpyAsync" && s.Label["sync_kind"] != nil:
			pageable = s
		case st[0] == "cudaDeviceSynchronize" && s.Label["pid"][0] == "4123":
			devSync = s
		}
	}
	if launchA == nil || pageable == nil || devSync == nil {
		t.Fatalf("samples missing: launch %v, pageable copy %v, device sync %v", launchA, pageable, devSync)
	}

	// A launch: kernel leaf, API above it, then thread and process roots.
	want := []string{"vecAdd", "cudaLaunchKernel", "thread python3 (tid 4123)", "python3 (pid 4123, container abc123def456)"}
	if got := names(launchA); !slices.Equal(got, want) {
		t.Errorf("launch stack %q, want %q", got, want)
	}
	if sys := launchA.Location[0].Line[0].Function.SystemName; sys != fixture.KernelVecAdd {
		t.Errorf("kernel system name %q", sys)
	}
	if _, ok := launchA.Label["sync_kind"]; ok {
		t.Error("sync_kind label on a launch")
	}
	if launchA.Value[valueIndex(t, p, "launches")] != 1 {
		t.Errorf("launch sample values %v", launchA.Value)
	}

	// A sync with a captured stack: the host frames between API and thread.
	want = []string{"cudaMemcpyAsync", "cudaMemcpyAsync (libcudart.so.13)", "train_step (train.py)", "0x555500003000",
		"thread python3 (tid 4123)", "python3 (pid 4123, container abc123def456)"}
	if got := names(pageable); !slices.Equal(got, want) {
		t.Errorf("pageable copy stack %q, want %q", got, want)
	}
	if pageable.Label["sync_kind"][0] != "pageable_memcpy" || pageable.Label["cuda_stream"][0] != "2" ||
		pageable.Value[valueIndex(t, p, "sync_wait")] != 30_000 || pageable.Value[valueIndex(t, p, "memcpy")] != 4096 {
		t.Errorf("pageable copy sample: labels %v values %v", pageable.Label, pageable.Value)
	}
	if devSync.Label["cuda_stream"][0] != "none" || devSync.Label["sync_kind"][0] != "device_sync" {
		t.Errorf("device sync labels %v", devSync.Label)
	}

	// The unresolved kernel and the unnamed thread get readable frames too.
	var unknownKernel, anonThread bool
	for _, f := range p.Function {
		unknownKernel = unknownKernel || f.Name == "kernel@0x409990"
		anonThread = anonThread || f.Name == "thread 4131"
	}
	if !unknownKernel || !anonThread {
		t.Errorf("frames for the unresolved kernel (%v) or the unnamed thread (%v) missing", unknownKernel, anonThread)
	}
}

// Identical calls from the same place collapse into one sample.
func TestAggregation(t *testing.T) {
	f := fixture.New()
	a := f.Traces[fixture.PIDA]
	dup := a.Calls[1] // the first vecAdd launch, again
	dup.Seq, dup.GPUOp, dup.Start = len(a.Calls), -1, dup.Start+100_000
	a.Calls = append(a.Calls, dup)

	c := NewCollector()
	f.Feed(c)
	if len(c.entries) != len(a.Calls)-1+len(f.Traces[fixture.PIDB].Calls) {
		t.Errorf("%d entries collected: the same call did not join its entry", len(c.entries))
	}
	p := roundTrip(t, f, Options{})
	count := valueIndex(t, p, "cuda_api")
	for _, s := range p.Sample {
		if names(s)[0] == "vecAdd" && s.Label["pid"][0] == "4123" && s.Label["cuda_stream"][0] == "2" {
			if s.Value[count] != 2 {
				t.Errorf("merged launch sample counts %d calls, want 2", s.Value[count])
			}
			return
		}
	}
	t.Error("launch sample missing")
}

func TestWriteError(t *testing.T) {
	f := fixture.New()
	c := NewCollector()
	f.Feed(c)
	if err := Write(failWriter{}, f.Result, c, Options{}); err == nil {
		t.Error("write error not returned")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// The collector's memory is bounded by distinct samples: a million calls
// from the same place make one entry, and adding one allocates nothing.
func TestCollectorBounded(t *testing.T) {
	f := fixture.New()
	p := f.Result.Processes[0]
	call := f.Traces[fixture.PIDA].Calls[1]
	c := NewCollector()
	c.Call(p, &call)
	if a := testing.AllocsPerRun(1000, func() { call.Start++; c.Call(p, &call) }); a != 0 {
		t.Errorf("%v allocations per call", a)
	}
	if len(c.entries) != 1 || c.entries[0].v[valCount] != 1001+1 {
		t.Errorf("%d entries, count %d", len(c.entries), c.entries[0].v[valCount])
	}
}

// A recording can make every call a sample of its own (a kernel each):
// past maxEntries the calls of each API share one sample, under a frame
// that says so, and the profile's comment counts them; no call is lost.
func TestCollectorEntriesBounded(t *testing.T) {
	f := fixture.New()
	p := f.Result.Processes[0]
	launch := f.Traces[fixture.PIDA].Calls[1]
	if launch.Spec().Class != event.ClassLaunch {
		t.Fatalf("call 1 is %s, want a launch", launch.API)
	}
	const extra = 100
	c := NewCollector()
	for i := range maxEntries + extra {
		launch.Args.Func = uint64(0x500000 + 16*i)
		c.Call(p, &launch)
	}
	if len(c.entries) != maxEntries+1 || c.other != extra {
		t.Fatalf("%d entries, %d calls past the bound; want %d and %d", len(c.entries), c.other, maxEntries+1, extra)
	}
	prof, err := Build(f.Result, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := total(t, prof, "cuda_api"); got != maxEntries+extra {
		t.Errorf("%d calls in the profile, want %d", got, maxEntries+extra)
	}
	var under int64
	for _, s := range prof.Sample {
		if slices.Contains(names(s), otherFrame) {
			under += s.Value[valCount]
		}
	}
	if under != extra || !strings.Contains(strings.Join(prof.Comments, "\n"), "100 calls past the profile's bound") {
		t.Errorf("%d calls under %q, comments %q; want %d", under, otherFrame, prof.Comments, extra)
	}
}

// A recording can make every frame of every stack a location of its own:
// past maxLocations, new frames are one location that says so, counted in
// a comment; every call stays in the profile.
func TestLocationsBounded(t *testing.T) {
	f := fixture.New()
	p := f.Result.Processes[0]
	call := f.Traces[fixture.PIDA].Calls[0]
	const stacks, depth = maxLocations/32 + 100, 32
	p.Stacks = nil
	c := NewCollector()
	for i := range stacks {
		st := make([]uint64, depth)
		for j := range st {
			st[j] = uint64(0x7f00_0000_0000 + (i*depth+j)*16)
		}
		p.Stacks = append(p.Stacks, st)
		call.Stack = int32(i)
		c.Call(p, &call)
	}
	prof, err := Build(f.Result, c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(prof.Location); n > maxLocations+1 {
		t.Errorf("%d locations, want at most %d", n, maxLocations+1)
	}
	if got := total(t, prof, "cuda_api"); got != stacks {
		t.Errorf("%d calls in the profile, want %d", got, stacks)
	}
	if !strings.Contains(strings.Join(prof.Comments, "\n"), "frames past the profile's bound") {
		t.Errorf("comments %q", prof.Comments)
	}
}
