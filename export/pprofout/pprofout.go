// Package pprofout turns a recording into a pprof profile: the CUDA calls,
// aggregated as the model hands them over by identical stack and labels,
// with the API (and for launches the kernel) as leaf frame under the host
// stack that made the call, rooted at the thread and the process. `go tool pprof` and any flame-graph
// viewer then answer "which code waits for the GPU, and how long".
//
// Native frames carry their address and the mapping of their object file,
// so that profile stores can group by library; Python frames take the
// place of the interpreter's evaluation frames that ran them, as
// py-spy --native shows them.
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
	// Modules are the object files mapped into the traced processes, when
	// the caller knows them: each native frame then gets the exact mapping
	// (range, file offset, build ID) of the one that holds it. Without,
	// a frame's mapping is inferred from its name, "function (object)":
	// the object's full path when the recording names it (a hooked CUDA
	// library, the command's absolute argv[0]), else its base name; the
	// pages its frames span; no build ID.
	Modules []Module
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
	// The stack was taken at the call's return: its first frame is the
	// return address in the caller, not the probed function's entry.
	atReturn bool
	// other: the calls of this API past maxEntries, with nothing else
	// told apart.
	other bool
}

// maxEntries bounds the distinct samples a Collector keeps: a recording
// can make every call one (a kernel, a thread, a stack of its own). Past
// it, the calls of each API share one sample, under a frame that says so.
const maxEntries = 1 << 16

type entry struct {
	key
	v [numValues]int64
}

// Collector aggregates calls as the model hands them over: its memory is
// bounded by the number of distinct samples (maxEntries), never by the
// number of calls. It keeps them in the order first seen, so profiles are
// deterministic.
type Collector struct {
	index   map[key]int
	entries []entry
	other   int64 // calls past maxEntries
}

var _ model.Sink = (*Collector)(nil)

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{index: map[key]int{}} }

// Reset empties the collector (the agent's --continuous: one profile per
// interval).
func (c *Collector) Reset() {
	clear(c.index)
	c.entries, c.other = c.entries[:0], 0
}

// Call adds c to its sample.
func (c *Collector) Call(p *model.Process, x *model.Call) {
	var class event.Class
	if s := x.Spec(); s != nil {
		class = s.Class
	}
	k := key{pid: p.PID, tid: x.TID, api: x.API, symbol: x.Symbol, sync: x.Sync, stream: x.Stream,
		stack: x.Stack, pyStack: x.PyStack, atReturn: x.HasRet}
	if class == event.ClassLaunch {
		k.kernel = x.Args.Func
	}
	i, ok := c.index[k]
	if !ok && len(c.entries) >= maxEntries {
		c.other++
		k = key{api: x.API, stream: -1, stack: -1, pyStack: -1, other: true}
		i, ok = c.index[k]
	}
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
	b := &builder{p: p, names: names, locs: map[frameKey]*profile.Location{}, funcs: map[funcKey]*profile.Function{},
		frames: map[model.NameKey]*profile.Location{}, kernels: map[model.NameKey]*profile.Location{},
		threads: map[model.NameKey]*profile.Location{}, roots: map[uint32]*profile.Location{},
		procs: map[uint32]*model.Process{}, samples: map[string]*profile.Sample{},
		layouts: map[stackPair]layout{}}
	for _, proc := range r.Processes {
		b.procs[proc.PID] = proc
	}
	b.mods = newModules(opts.Modules, b.procs)
	var entries []entry
	if c != nil {
		entries = c.entries
	}
	b.prepare(entries, r.Processes)
	for i := range entries {
		b.sample(&entries[i])
	}
	if s := b.stacksComment(); s != "" {
		p.Comments = append(p.Comments, s)
	}
	if b.pastFrames > 0 {
		p.Comments = append(p.Comments, fmt.Sprintf("cudatap: %d frames past the profile's bound of %d distinct locations are one, %q", b.pastFrames, maxLocations, pastFrame))
	}
	if c != nil && c.other > 0 {
		p.Comments = append(p.Comments, fmt.Sprintf("cudatap: %d calls past the profile's bound of %d distinct samples are under %q, by API only", c.other, maxEntries, otherFrame))
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

// frameKey identifies a location without an address: kernels keep their
// mangled symbol as the system name, so two kernels that shorten alike
// stay apart; a Python frame is its function at a file and line.
type frameKey struct{ name, system string }

// funcKey identifies a function.
type funcKey struct{ name, system, file string }

// stackPair is a call's pair of stacks in its process.
type stackPair struct {
	pid            uint32
	stack, pyStack int32
}

// builder dedupes functions and locations (one line each) and merges
// samples with the same stack and labels, as pyroscope's ebpf builder does.
type builder struct {
	p     *profile.Profile
	names *model.Names
	procs map[uint32]*model.Process
	locs  map[frameKey]*profile.Location
	funcs map[funcKey]*profile.Function
	// Per process: the same address means different code elsewhere.
	// Native frames by their pprof address.
	frames, kernels, threads map[model.NameKey]*profile.Location
	mods                     *modules
	layouts                  map[stackPair]layout
	outcomes                 [unmatched + 1]int // stack pairs by how their Python frames were laid out
	roots                    map[uint32]*profile.Location
	samples                  map[string]*profile.Sample
	pastLoc                  *profile.Location // of the frames past maxLocations
	pastFrames               int64
	stack                    []*profile.Location // the sample being built
	key                      []byte              // its identity: location ids and label values
}

func (b *builder) function(name, system, file string) *profile.Function {
	k := funcKey{name, system, file}
	if f, ok := b.funcs[k]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: system, Filename: file}
	b.p.Function = append(b.p.Function, f)
	b.funcs[k] = f
	return f
}

// maxLocations bounds the profile's locations (and so its functions): a
// recording can make every frame of every stack one of its own (65,536
// distinct stacks of a process, 32 native and 24 Python frames each).
// Past it, a frame not seen before is one location that says so.
const maxLocations = 1 << 17

// pastFrame names the location of the frames past maxLocations.
const pastFrame = "frames past the profile's bound of distinct locations"

// past is the location of a frame past maxLocations.
func (b *builder) past() *profile.Location {
	b.pastFrames++
	if b.pastLoc == nil {
		b.pastLoc = b.newLocation(&profile.Location{Line: []profile.Line{{Function: b.function(pastFrame, "", "")}}})
	}
	return b.pastLoc
}

func (b *builder) full() bool { return len(b.p.Location) >= maxLocations }

func (b *builder) newLocation(l *profile.Location) *profile.Location {
	l.ID = uint64(len(b.p.Location) + 1)
	b.p.Location = append(b.p.Location, l)
	return l
}

// location is a frame of cudatap's own: an API, a kernel, a thread, a
// process.
func (b *builder) location(name, system string) *profile.Location {
	k := frameKey{name, system}
	if l, ok := b.locs[k]; ok {
		return l
	}
	if b.full() {
		return b.past()
	}
	l := b.newLocation(&profile.Location{Line: []profile.Line{{Function: b.function(name, system, "")}}})
	b.locs[k] = l
	return l
}

// nativeLocation is the location of frame i of a native stack of pid: its
// address and mapping, and the function as resolved while the process
// lived, in the object's file.
func (b *builder) nativeLocation(pid uint32, raw uint64, i int, atReturn bool) *profile.Location {
	addr := frameAddress(raw, i, atReturn)
	nk := model.NameKey{PID: pid, Key: addr}
	if l, ok := b.frames[nk]; ok {
		return l
	}
	if b.full() {
		return b.past()
	}
	name := describe.Frame(b.names, pid, raw)
	l := &profile.Location{Address: addr}
	file := ""
	if m := b.mods.at(pid, raw, addr, name); m != nil {
		l.Mapping, file = m.m, m.file
	}
	// No system name: pprof would take an equal one for a name to
	// demangle, and cut "<...>" out of it.
	l.Line = []profile.Line{{Function: b.function(name, "", file)}}
	b.frames[nk] = b.newLocation(l)
	return l
}

// pyLocation is the pprof location of a Python frame named "file:line
// function" (unnamed frames keep their code object's address).
func (b *builder) pyLocation(name string, k model.PyKey) *profile.Location {
	file, line, fn := describe.SplitPyFrame(name)
	if fn == "" {
		fn = fmt.Sprintf("<python code 0x%x>", k.Code)
	}
	key := frameKey{fn, file + ":" + strconv.Itoa(line)}
	if l, ok := b.locs[key]; ok {
		return l
	}
	if b.full() {
		return b.past()
	}
	// No system name: pprof demangles a function whose system name equals
	// its name, and its demangler cuts "<module>" down to "".
	f := b.function(fn, "", file)
	l := b.newLocation(&profile.Location{Line: []profile.Line{{Function: f, Line: int64(line)}}})
	b.locs[key] = l
	return l
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

// otherFrame is the root of the calls past maxEntries.
const otherFrame = "calls past the profile's bound of distinct samples"

// sample adds one collected entry: the kernel leaf for launches, the API,
// the native frames, the Python frames above them (their callers), then
// the thread and the process as roots.
func (b *builder) sample(e *entry) {
	if e.other {
		b.stack = append(b.stack[:0], b.location(e.api.String(), ""), b.location(otherFrame, ""))
		b.add(e.api.String(), "none", "", "other", &e.v)
		return
	}
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
	native, py := stacks(p, e.stack, e.pyStack)
	lay := b.layouts[stackPair{e.pid, e.stack, e.pyStack}]
	next := 0
	for i := 0; i < len(native); i++ {
		if next < len(lay.acts) && lay.acts[next].first == i {
			a := lay.acts[next]
			next++
			if a.py1 > a.py0 {
				b.pyFrames(e.pid, py[a.py0:a.py1])
				i = a.last
				continue
			}
		}
		b.stack = append(b.stack, b.nativeLocation(e.pid, native[i], i, e.atReturn))
	}
	// The Python frames no activation took are callers of the native
	// ones: above them in a flame graph.
	b.pyFrames(e.pid, py[lay.rest:])
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

func (b *builder) pyFrames(pid uint32, py []model.PyKey) {
	for _, k := range py {
		b.stack = append(b.stack, b.pyLocation(b.names.PyFrame(pid, k), k))
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

func threadName(n *model.Names, pid, tid uint32) string {
	if name := n.Thread(pid, tid); name != "" {
		return fmt.Sprintf("thread %s (tid %d)", name, tid)
	}
	return fmt.Sprintf("thread %d", tid)
}

// stacks is the native and the Python stack of a call, nil where it has
// none.
func stacks(p *model.Process, stack, pyStack int32) (native []uint64, py []model.PyKey) {
	if stack >= 0 && int(stack) < len(p.Stacks) {
		native = p.Stacks[stack]
	}
	if pyStack >= 0 && int(pyStack) < len(p.PyStacks) {
		py = p.PyStacks[pyStack]
	}
	return native, py
}

// prepare looks at each pair of stacks the entries use, once: their native
// frames make the mappings; then the layout of their Python frames is
// decided, first from each pair's own evidence, then for the pairs left
// with the call sites so learnt.
func (b *builder) prepare(entries []entry, procs []*model.Process) {
	var pairs []stackPair
	seen := map[stackPair]bool{}
	type nativeKey struct {
		pid      uint32
		stack    int32
		atReturn bool
	}
	seenNative := map[nativeKey]bool{}
	for i := range entries {
		e := &entries[i]
		if e.other {
			continue
		}
		k := stackPair{e.pid, e.stack, e.pyStack}
		if !seen[k] {
			seen[k] = true
			pairs = append(pairs, k)
		}
		if nk := (nativeKey{e.pid, e.stack, e.atReturn}); !seenNative[nk] {
			seenNative[nk] = true
			native, _ := stacks(b.proc(e.pid), e.stack, -1)
			for i, raw := range native {
				b.mods.see(e.pid, raw, frameAddress(raw, i, e.atReturn), b.names.Frame(e.pid, raw))
			}
		}
	}
	b.mods.build(b.p)
	if len(b.p.Mapping) == 0 {
		b.mainMapping(pairs, procs)
	}

	in := newInterleaver(b.names)
	var later []stackPair
	for _, k := range pairs {
		native, py := stacks(b.proc(k.pid), k.stack, k.pyStack)
		l := in.decide(k.pid, native, py, false)
		if l.how == unmatched {
			later = append(later, k)
		}
		b.layouts[k] = l
	}
	for _, k := range later {
		native, py := stacks(b.proc(k.pid), k.stack, k.pyStack)
		b.layouts[k] = in.decide(k.pid, native, py, true)
	}
	for _, k := range pairs {
		b.outcomes[b.layouts[k].how]++
	}
}

// mainMapping gives a profile without native frames a main binary all the
// same, the command of its first process, marked symbolized: pprof
// otherwise makes up an empty one and warns "Main binary filename not
// available" in every view.
func (b *builder) mainMapping(pairs []stackPair, procs []*model.Process) {
	pids := make([]uint32, 0, len(pairs)+len(procs))
	for _, k := range pairs {
		pids = append(pids, k.pid)
	}
	for _, p := range procs {
		pids = append(pids, p.PID)
	}
	for _, pid := range pids {
		info := b.proc(pid).Info
		file, _, _ := strings.Cut(info.Cmdline, " ")
		if file == "" {
			file = info.Comm
		}
		if file != "" {
			b.p.Mapping = []*profile.Mapping{{ID: 1, File: file, HasFunctions: true}}
			return
		}
	}
}

// stacksComment says, when it applies, that the mappings were inferred and
// how many stacks have their Python frames in place.
func (b *builder) stacksComment() string {
	var parts []string
	if b.mods.inferredOnly() {
		parts = append(parts, "mappings inferred from frame names (the recording keeps no memory maps or build IDs)")
	}
	o := b.outcomes
	placed, above := o[interleaved]+o[learnt], o[noEval]+o[unmatched]
	if placed+above > 0 {
		s := fmt.Sprintf("Python frames replace the interpreter's evaluation frames in %d of %d stacks", placed, placed+above)
		if o[learnt] > 0 {
			s += fmt.Sprintf(" (%d by call sites learnt from other stacks)", o[learnt])
		}
		if above > 0 {
			s += fmt.Sprintf("; above the native frames in %d (%d whose native frames do not reach the interpreter, %d whose evaluation frames could not be matched)",
				above, o[noEval], o[unmatched])
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return ""
	}
	return "cudatap: " + strings.Join(parts, "; ")
}
