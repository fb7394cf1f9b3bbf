// Package pprofout turns a recording into a pprof profile: one sample per
// CUDA call, aggregated by identical stack and labels, with the API (and for
// launches the kernel) as leaf frame under the host stack that made the call,
// rooted at the thread and the process. `go tool pprof` and any flame-graph
// viewer then answer "which code waits for the GPU, and how long".
package pprofout

import (
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Options tune the profile.
type Options struct {
	// DefaultSampleType is the sample type viewers show first; "" means
	// sync_wait, the one that answers "where does my code wait".
	DefaultSampleType string
}

// Sample value indices, in the order of sampleTypes.
const (
	valCount = iota
	valTime
	valSyncWait
	valMemcpyBytes
	valLaunches
	numValues
)

func sampleTypes() []*profile.ValueType {
	return []*profile.ValueType{
		valCount:       {Type: "cuda_api", Unit: "count"},
		valTime:        {Type: "cuda_api_time", Unit: "nanoseconds"},
		valSyncWait:    {Type: "sync_wait", Unit: "nanoseconds"},
		valMemcpyBytes: {Type: "memcpy", Unit: "bytes"},
		valLaunches:    {Type: "launches", Unit: "count"},
	}
}

// Build makes a valid profile of r.
func Build(r *model.Result, opts Options) (*profile.Profile, error) {
	def := opts.DefaultSampleType
	if def == "" {
		def = "sync_wait"
	}
	p := &profile.Profile{
		SampleType:        sampleTypes(),
		DefaultSampleType: def,
		PeriodType:        &profile.ValueType{Type: "cuda_api", Unit: "count"},
		Period:            1,
		TimeNanos:         int64(r.Start) + r.WallOffsetNs,
		Comments:          []string{"cudatap: " + describe.Drops(r.Drops)},
	}
	if r.End > r.Start {
		p.DurationNanos = int64(r.End - r.Start)
	}
	b := &builder{p: p, locs: map[frameKey]*profile.Location{}, samples: map[string]*profile.Sample{}}
	for _, proc := range r.Processes {
		b.process(proc)
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return p, nil
}

// WriteFile writes r's profile to path as gzip-compressed protobuf, the
// form pprof reads (conventionally named *.pb.gz).
func WriteFile(path string, r *model.Result, opts Options) error {
	p, err := Build(r, opts)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write pprof profile: %w", err)
	}
	err = p.Write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write pprof profile %s: %w", path, err)
	}
	return nil
}

// frameKey identifies a function: kernels keep their mangled symbol as the
// system name, so two kernels that shorten alike stay apart.
type frameKey struct{ name, system string }

// builder dedupes functions and locations (one line each) and merges
// samples with the same stack and labels, as pyroscope's ebpf builder does.
type builder struct {
	p       *profile.Profile
	locs    map[frameKey]*profile.Location
	samples map[string]*profile.Sample
	stack   []*profile.Location // the sample being built
	key     []byte              // its identity: location ids and label values
}

func (b *builder) location(name, system string) *profile.Location {
	k := frameKey{name, system}
	if l, ok := b.locs[k]; ok {
		return l
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: system}
	b.p.Function = append(b.p.Function, f)
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: f}}}
	b.p.Location = append(b.p.Location, l)
	b.locs[k] = l
	return l
}

// pyLocation is the pprof location of a Python frame named "file:line
// function" (unnamed frames keep their code object's address).
func (b *builder) pyLocation(name string, k model.PyKey) *profile.Location {
	file, line, fn := splitPyFrame(name)
	if fn == "" {
		fn = fmt.Sprintf("<python code 0x%x>", k.Code)
	}
	key := frameKey{fn, file + ":" + strconv.Itoa(line)}
	if l, ok := b.locs[key]; ok {
		return l
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: fn, SystemName: fn, Filename: file}
	b.p.Function = append(b.p.Function, f)
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: f, Line: int64(line)}}}
	b.p.Location = append(b.p.Location, l)
	b.locs[key] = l
	return l
}

// splitPyFrame takes "file:line function" apart.
func splitPyFrame(s string) (file string, line int, fn string) {
	sp := strings.LastIndexByte(s, ' ')
	if sp < 0 {
		return "", 0, ""
	}
	loc, fn := s[:sp], s[sp+1:]
	colon := strings.LastIndexByte(loc, ':')
	if colon < 0 {
		return loc, 0, fn
	}
	line, _ = strconv.Atoi(loc[colon+1:])
	return loc[:colon], line, fn
}

func (b *builder) process(p *model.Process) {
	pid := strconv.FormatUint(uint64(p.PID), 10)
	root := b.location(p.Label(), "")
	// Per-process caches: the same address means different code elsewhere.
	frames := map[uint64]*profile.Location{}
	kernels := map[uint64]*profile.Location{}
	threads := map[uint32]*profile.Location{}

	for i := range p.Calls {
		c := &p.Calls[i]
		var class event.Class
		if s := c.Spec(); s != nil {
			class = s.Class
		}

		b.stack = b.stack[:0]
		if class == event.ClassLaunch {
			l, ok := kernels[c.Args.Func]
			if !ok {
				k := describe.KernelAt(p, c.Args.Func)
				l = b.location(k.Display, k.Mangled)
				kernels[c.Args.Func] = l
			}
			b.stack = append(b.stack, l)
		}
		b.stack = append(b.stack, b.location(c.API.String(), c.SymbolName()))
		if c.Stack >= 0 && int(c.Stack) < len(p.Stacks) {
			for _, addr := range p.Stacks[c.Stack] {
				l, ok := frames[addr]
				if !ok {
					l = b.location(describe.Frame(p, addr), "")
					frames[addr] = l
				}
				b.stack = append(b.stack, l)
			}
		}
		// Python frames are the callers of the native ones: above them in
		// a flame graph.
		if c.PyStack >= 0 && int(c.PyStack) < len(p.PyStacks) {
			for _, k := range p.PyStacks[c.PyStack] {
				b.stack = append(b.stack, b.pyLocation(p.PyFrames[k], k))
			}
		}
		t, ok := threads[c.TID]
		if !ok {
			t = b.location(threadName(p, c.TID), "")
			threads[c.TID] = t
		}
		b.stack = append(b.stack, t, root)

		var v [numValues]int64
		v[valCount] = 1
		v[valTime] = int64(c.Duration())
		syncKind := ""
		if c.Sync >= 0 && int(c.Sync) < len(p.Syncs) {
			s := &p.Syncs[c.Sync]
			v[valSyncWait] = int64(s.BlockedNs)
			syncKind = s.Kind.String()
		}
		switch class {
		case event.ClassMemcpy:
			v[valMemcpyBytes] = int64(c.Args.Bytes)
		case event.ClassLaunch:
			v[valLaunches] = 1
		}
		stream := "none"
		if c.Stream >= 0 {
			stream = strconv.Itoa(int(c.Stream))
		}
		b.add(c.API.String(), stream, syncKind, pid, &v)
	}
}

// add merges the values into the sample with b.stack and these labels.
// Kernel names stay in frames, never labels: labels are for grouping and
// filtering, and kernel names would explode their cardinality.
func (b *builder) add(api, stream, syncKind, pid string, v *[numValues]int64) {
	b.key = b.key[:0]
	for _, l := range b.stack {
		b.key = binary.AppendUvarint(b.key, l.ID)
	}
	for _, s := range [...]string{api, stream, syncKind, pid} {
		b.key = append(b.key, 0)
		b.key = append(b.key, s...)
	}
	s, ok := b.samples[string(b.key)]
	if !ok {
		labels := map[string][]string{"cuda_api": {api}, "cuda_stream": {stream}, "pid": {pid}}
		if syncKind != "" {
			labels["sync_kind"] = []string{syncKind}
		}
		s = &profile.Sample{
			Location: append([]*profile.Location(nil), b.stack...),
			Value:    make([]int64, numValues),
			Label:    labels,
		}
		b.p.Sample = append(b.p.Sample, s)
		b.samples[string(b.key)] = s
	}
	for i, x := range v {
		s.Value[i] += x
	}
}

func threadName(p *model.Process, tid uint32) string {
	if name := p.Threads[tid]; name != "" {
		return fmt.Sprintf("thread %s (tid %d)", name, tid)
	}
	return fmt.Sprintf("thread %d", tid)
}
