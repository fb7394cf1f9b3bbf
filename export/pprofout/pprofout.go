// Package pprofout turns a recording into a pprof profile: the CUDA calls,
// aggregated as the model hands them over by identical stack and labels,
// with the API (and for launches the kernel) as leaf frame under the host
// stack that made the call, rooted at the thread and the process. `go tool pprof` and any flame-graph
// viewer then answer "which code waits for the GPU, and how long".
package pprofout

import (
	"encoding/binary"
	"fmt"
	"io"
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

// key is what makes two calls one sample: the same thread, API symbol,
// stream, stacks, sync kind and, for launches, kernel.
type key struct {
	pid, tid       uint32
	api            event.API
	symbol         uint8
	sync           model.SyncKind
	stream         int32
	stack, pyStack int32
	kernel         uint64 // the launched function, 0 for other calls
}

type entry struct {
	key
	v [numValues]int64
}

// Collector aggregates calls as the model hands them over: its memory is
// bounded by the number of distinct samples, never by the number of calls.
// It keeps them in the order first seen, so profiles are deterministic.
type Collector struct {
	index   map[key]int
	entries []entry
}

var _ model.Sink = (*Collector)(nil)

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{index: map[key]int{}} }

// Call adds c to its sample.
func (c *Collector) Call(p *model.Process, x *model.Call) {
	var class event.Class
	if s := x.Spec(); s != nil {
		class = s.Class
	}
	k := key{pid: p.PID, tid: x.TID, api: x.API, symbol: x.Symbol, sync: x.Sync, stream: x.Stream,
		stack: x.Stack, pyStack: x.PyStack}
	if class == event.ClassLaunch {
		k.kernel = x.Args.Func
	}
	i, ok := c.index[k]
	if !ok {
		i = len(c.entries)
		c.index[k] = i
		c.entries = append(c.entries, entry{key: k})
	}
	v := &c.entries[i].v
	v[valCount]++
	v[valTime] += int64(x.Duration())
	v[valSyncWait] += int64(x.BlockedNs)
	switch class {
	case event.ClassMemcpy:
		v[valMemcpyBytes] += int64(x.Args.Bytes)
	case event.ClassLaunch:
		v[valLaunches]++
	}
}

func (*Collector) Sync(*model.Process, *model.Sync)             {}
func (*Collector) GPUOp(*model.Process, *model.GPUOp)           {}
func (*Collector) Dependency(*model.Process, *model.Dependency) {}
func (*Collector) Hold(*model.Process, *model.Hold)             {}

// Build makes a valid profile of the calls c collected, named from r.
func Build(r *model.Result, c *Collector, opts Options) (*profile.Profile, error) {
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
		Comments:          []string{"cudatap: " + describe.Account(r)},
	}
	if r.End > r.Start {
		p.DurationNanos = int64(r.End - r.Start)
	}
	names := r.Names
	if names == nil {
		names = model.NewNames()
	}
	b := &builder{p: p, names: names, locs: map[frameKey]*profile.Location{},
		frames: map[model.NameKey]*profile.Location{}, kernels: map[model.NameKey]*profile.Location{},
		threads: map[model.NameKey]*profile.Location{}, roots: map[uint32]*profile.Location{},
		procs: map[uint32]*model.Process{}, samples: map[string]*profile.Sample{}}
	for _, proc := range r.Processes {
		b.procs[proc.PID] = proc
	}
	if c != nil {
		for i := range c.entries {
			b.sample(&c.entries[i])
		}
	}
	if err := p.CheckValid(); err != nil {
		return nil, fmt.Errorf("build pprof profile: %w", err)
	}
	return p, nil
}

// Write writes the profile of the calls c collected to w as
// gzip-compressed protobuf, the form pprof reads (conventionally named
// *.pb.gz).
func Write(w io.Writer, r *model.Result, c *Collector, opts Options) error {
	p, err := Build(r, c, opts)
	if err != nil {
		return err
	}
	if err := p.Write(w); err != nil {
		return fmt.Errorf("write pprof profile: %w", err)
	}
	return nil
}

// frameKey identifies a function: kernels keep their mangled symbol as the
// system name, so two kernels that shorten alike stay apart.
type frameKey struct{ name, system string }

// builder dedupes functions and locations (one line each) and merges
// samples with the same stack and labels, as pyroscope's ebpf builder does.
type builder struct {
	p     *profile.Profile
	names *model.Names
	procs map[uint32]*model.Process
	locs  map[frameKey]*profile.Location
	// Per process: the same address means different code elsewhere.
	frames, kernels, threads map[model.NameKey]*profile.Location
	roots                    map[uint32]*profile.Location
	samples                  map[string]*profile.Sample
	stack                    []*profile.Location // the sample being built
	key                      []byte              // its identity: location ids and label values
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
	// No system name: pprof demangles a function whose system name equals
	// its name, and its demangler cuts "<module>" down to "".
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: fn, Filename: file}
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

// proc is the process of pid: r's, else a bare one (a sink fed more than
// r holds).
func (b *builder) proc(pid uint32) *model.Process {
	p := b.procs[pid]
	if p == nil {
		p = &model.Process{PID: pid}
		b.procs[pid] = p
	}
	return p
}

// sample adds one collected entry: the kernel leaf for launches, the API,
// the native frames, the Python frames above them (their callers), then
// the thread and the process as roots.
func (b *builder) sample(e *entry) {
	p := b.proc(e.pid)
	b.stack = b.stack[:0]
	if spec := event.Lookup(e.api); spec != nil && spec.Class == event.ClassLaunch {
		nk := model.NameKey{PID: e.pid, Key: e.kernel}
		l, ok := b.kernels[nk]
		if !ok {
			k := describe.KernelOf(b.names, p, e.kernel)
			l = b.location(k.Display, k.Mangled)
			b.kernels[nk] = l
		}
		b.stack = append(b.stack, l)
	}
	symbol := e.api.String()
	if spec := event.Lookup(e.api); spec != nil {
		symbol = spec.Symbol(int(e.symbol))
	}
	b.stack = append(b.stack, b.location(e.api.String(), symbol))
	if e.stack >= 0 && int(e.stack) < len(p.Stacks) {
		for _, addr := range p.Stacks[e.stack] {
			nk := model.NameKey{PID: e.pid, Key: addr}
			l, ok := b.frames[nk]
			if !ok {
				l = b.location(describe.Frame(b.names, e.pid, addr), "")
				b.frames[nk] = l
			}
			b.stack = append(b.stack, l)
		}
	}
	// Python frames are the callers of the native ones: above them in a
	// flame graph.
	if e.pyStack >= 0 && int(e.pyStack) < len(p.PyStacks) {
		for _, k := range p.PyStacks[e.pyStack] {
			b.stack = append(b.stack, b.pyLocation(b.names.PyFrame(e.pid, k), k))
		}
	}
	tk := model.NameKey{PID: e.pid, Key: uint64(e.tid)}
	t, ok := b.threads[tk]
	if !ok {
		t = b.location(threadName(b.names, e.pid, e.tid), "")
		b.threads[tk] = t
	}
	root, ok := b.roots[e.pid]
	if !ok {
		root = b.location(p.Label(), "")
		b.roots[e.pid] = root
	}
	b.stack = append(b.stack, t, root)

	syncKind := ""
	if e.sync != model.SyncNone {
		syncKind = e.sync.String()
	}
	stream := "none"
	if e.stream >= 0 {
		stream = strconv.Itoa(int(e.stream))
	}
	b.add(e.api.String(), stream, syncKind, strconv.FormatUint(uint64(e.pid), 10), &e.v)
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

func threadName(n *model.Names, pid, tid uint32) string {
	if name := n.Thread(pid, tid); name != "" {
		return fmt.Sprintf("thread %s (tid %d)", name, tid)
	}
	return fmt.Sprintf("thread %d", tid)
}
