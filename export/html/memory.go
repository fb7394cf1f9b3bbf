package html

import (
	"fmt"
	"io"
	"strconv"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Device memory as the process reserved it through CUDA: cudaMalloc,
// cuMemAlloc and their async forms, and their frees. A caching allocator
// (PyTorch's) reserves big blocks and hands out tensors from them without
// calling CUDA: this is what it reserved (torch.cuda.memory_reserved), not
// the tensors allocated in it (memory_allocated).

// allocKey is where allocations come from: the API and the call's stacks.
type allocKey struct {
	api       event.API
	sym       uint8
	stack, py int32
}

// otherStacks groups allocations past maxGroups distinct places.
var otherStacks = allocKey{stack: -2, py: -2}

const maxGroups = 4096 // distinct allocation places per process

type allocGroup struct {
	key                   allocKey
	liveBytes, liveN      uint64
	allocBytes, allocN    uint64
	peakBytes, peakN      uint64 // live at the snapshot near the peak
	freedBytes, freedN    uint64
	firstAlloc, lastAlloc uint64
}

type liveAlloc struct {
	size       uint64
	group      int32
	start, end uint64 // the call that made it
}

type memState struct {
	series         *maxSeries
	groups         []allocGroup
	index          map[allocKey]int32
	live           map[uint64]liveAlloc
	allocs, frees  int64
	allocBytes     uint64
	peak, peakAt   uint64
	snapBytes      uint64 // in use when the holders at the peak were taken
	snapAt         uint64
	untracked      int64 // allocations not attributed (Options.MaxLive reached)
	untrackedBytes uint64
	unknownFrees   int64 // frees of pointers allocated before the recording (or not attributed)
	lastFreePtr    uint64
	lastFreeAt     uint64
	seen           bool
}

func (m *memState) init() {
	m.index = map[allocKey]int32{}
	m.live = map[uint64]liveAlloc{}
}

func (m *memState) group(k allocKey, t uint64) *allocGroup {
	i, ok := m.index[k]
	if !ok {
		if len(m.groups) >= maxGroups {
			k = otherStacks
			i, ok = m.index[k]
		}
		if !ok {
			i = int32(len(m.groups))
			m.groups = append(m.groups, allocGroup{key: k, firstAlloc: t})
			m.index[k] = i
		}
	}
	return &m.groups[i]
}

func (m *memState) release(l liveAlloc) {
	g := &m.groups[l.group]
	g.liveBytes -= l.size
	g.liveN--
	g.freedBytes += l.size
	g.freedN++
}

// memory follows an allocation or a free; the amount in use is the
// model's (Process.DeviceMemInUse, updated before the sink sees the call),
// the attribution to stacks this collector's.
func (c *Collector) memory(ps *procState, p *model.Process, x *model.Call, class event.Class) {
	m := &ps.mem
	a := &x.Args
	if a.Ptr == 0 || (x.HasRet && x.Ret != 0) {
		return
	}
	m.seen = true
	switch class {
	case event.ClassMalloc:
		size := a.Size
		if prev, dup := m.live[a.Ptr]; dup {
			g := &m.groups[prev.group]
			g.liveBytes -= prev.size
			g.liveN--
			if prev.size == size && prev.start >= x.Start && prev.end <= x.End {
				// The driver's allocation inside the runtime's: one
				// allocation, named by the outer call.
				g.allocBytes -= prev.size
				g.allocN--
				m.allocs--
				m.allocBytes -= prev.size
			} else {
				g.freedBytes += prev.size // reused: freed unseen
				g.freedN++
			}
			delete(m.live, a.Ptr)
			c.live--
		}
		m.allocs++
		m.allocBytes += size
		k := allocKey{api: x.API, sym: x.Symbol, stack: x.Stack, py: x.PyStack}
		g := m.group(k, x.Start)
		gi := m.index[g.key]
		g.allocN++
		g.allocBytes += size
		g.lastAlloc = x.Start
		if c.live < c.opts.MaxLive {
			m.live[a.Ptr] = liveAlloc{size: size, group: gi, start: x.Start, end: x.End}
			c.live++
			g.liveN++
			g.liveBytes += size
		} else {
			m.untracked++
			m.untrackedBytes += size
		}
	case event.ClassFree:
		if l, found := m.live[a.Ptr]; found {
			m.release(l)
			delete(m.live, a.Ptr)
			c.live--
			m.frees++
		} else if a.Ptr == m.lastFreePtr && m.lastFreeAt >= x.Start && m.lastFreeAt <= x.End {
			// The driver's free inside the runtime's, seen first.
		} else {
			m.frees++
			m.unknownFrees++
		}
		m.lastFreePtr, m.lastFreeAt = a.Ptr, x.Start
	}
	inUse := p.DeviceMemInUse
	if m.series == nil {
		m.series = c.clock.newMax()
	}
	m.series.set(c.clock, x.End, inUse)
	if inUse > m.peak {
		m.peak, m.peakAt = inUse, x.End
		// Who holds the memory at the peak: a snapshot of the groups,
		// retaken each time the peak grows by more than 1/256.
		if inUse > m.snapBytes+m.snapBytes/256 {
			m.snapBytes, m.snapAt = inUse, x.End
			for i := range m.groups {
				m.groups[i].peakBytes, m.groups[i].peakN = m.groups[i].liveBytes, m.groups[i].liveN
			}
		}
	}
}

// Holder is a place in the program that holds (or held) device memory:
// the allocating API and the stacks of its calls.
type Holder struct {
	API         string
	Where       string // the innermost Python line, else native frame, else ""
	Python      []string
	Native      []string
	Bytes       uint64 // live (at the end, or at the peak)
	Count       uint64
	AllocBytes  uint64 // allocated over the whole recording
	AllocCount  uint64
	PeakBytes   uint64 // live near the process's peak
	PeakCount   uint64
	FirstAlloc  uint64
	LastAlloc   uint64
	OtherStacks bool // the allocations past the distinct places kept
}

// memProfileTypes are the memory profile's sample types.
var memProfileTypes = []*profile.ValueType{
	{Type: "gpu_alloc", Unit: "count"},
	{Type: "gpu_alloc", Unit: "bytes"},
	{Type: "gpu_inuse", Unit: "count"},
	{Type: "gpu_inuse", Unit: "bytes"},
	{Type: "gpu_peak", Unit: "bytes"},
}

// WriteMemoryProfile writes the device memory the processes reserved
// through CUDA as a pprof profile (gzip-compressed protobuf): per place
// that allocated, what it allocated over the recording (gpu_alloc), what
// was still allocated at the end (gpu_inuse, the default: what was never
// freed) and what it held near the process's peak (gpu_peak). Stacks are
// the allocating API, its native callers, its Python frames, the process.
func (rep *Report) WriteMemoryProfile(w io.Writer) error {
	p := &profile.Profile{
		SampleType:        memProfileTypes,
		DefaultSampleType: "gpu_inuse",
		PeriodType:        &profile.ValueType{Type: "gpu_alloc", Unit: "count"},
		Period:            1,
		TimeNanos:         int64(rep.Start) + rep.WallOffsetNs,
		Comments:          []string{"cudatap: device memory reserved through CUDA (cudaMalloc, cuMemAlloc, ...), not the tensors a caching allocator hands out of it", "cudatap: " + rep.Account},
	}
	if rep.End > rep.Start {
		p.DurationNanos = int64(rep.End - rep.Start)
	}
	funcs := map[[2]string]*profile.Function{}
	locs := map[[2]string]*profile.Location{}
	loc := func(name, file string, line int64) *profile.Location {
		k := [2]string{name, file + ":" + strconv.FormatInt(line, 10)}
		if l := locs[k]; l != nil {
			return l
		}
		fk := [2]string{name, file}
		f := funcs[fk]
		if f == nil {
			f = &profile.Function{ID: uint64(len(p.Function) + 1), Name: name, Filename: file}
			if file == "" {
				// Not a Python frame: pprof demangles a function whose
				// system name equals its name, and its demangler cuts
				// Python's "<module>" down to "".
				f.SystemName = name
			}
			funcs[fk] = f
			p.Function = append(p.Function, f)
		}
		l := &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: f, Line: line}}}
		locs[k] = l
		p.Location = append(p.Location, l)
		return l
	}
	for _, pr := range rep.Processes {
		root := loc(pr.Label, "", 0)
		for _, h := range pr.Memory.groups {
			s := &profile.Sample{
				Value:    []int64{int64(h.AllocCount), int64(h.AllocBytes), int64(h.Count), int64(h.Bytes), int64(h.PeakBytes)},
				Label:    map[string][]string{"cuda_api": {h.API}},
				NumLabel: map[string][]int64{"pid": {int64(pr.PID)}},
			}
			s.Location = append(s.Location, loc(h.API, "", 0))
			for _, f := range h.Native {
				s.Location = append(s.Location, loc(f, "", 0))
			}
			for _, f := range h.Python {
				file, line, fn := describe.SplitPyFrame(f)
				if fn == "" {
					fn = f
				}
				s.Location = append(s.Location, loc(fn, file, int64(line)))
			}
			if h.OtherStacks {
				s.Location = append(s.Location, loc("(other allocation sites)", "", 0))
			}
			s.Location = append(s.Location, root)
			p.Sample = append(p.Sample, s)
		}
	}
	if err := p.CheckValid(); err != nil {
		return fmt.Errorf("build the device memory profile: %w", err)
	}
	return p.Write(w)
}
