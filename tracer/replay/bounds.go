package replay

import (
	"cmp"
	"maps"
	"slices"

	"github.com/cudatap/cudatap/tracer/model"
)

// A recording is untrusted input: besides its events (the model bounds
// what they make it keep), its name tables and NVML series are kept whole
// by a replay, so they are bounded here. Past the bounds, names are not
// kept and samples are thinned; both are counted (Replay.NamesNotKept,
// Replay.CountersThinned) and shown with the model's limits. A real
// recording holds far fewer: a few hundred thousand names at most, and the
// sampler's polls (ten a second per device).
const (
	maxNames     = 1 << 20   // entries of all name tables together
	maxNameBytes = 128 << 20 // their names' bytes
	// Tables of which the model uses few: it keeps 1,024 processes and
	// 16,384 threads apart (tracer/model/limits.go); a process maps
	// hundreds of files.
	maxProcNames   = 1 << 13
	maxThreadNames = 1 << 16
	maxMappings    = 1 << 16
	// maxCounters bounds the NVML samples kept; past it the series are
	// thinned to half their resolution, as often as needed.
	maxCounters = 1 << 18
	// maxTracks bounds the counter tracks (device and name); maxValues
	// the values one sample keeps.
	maxTracks = 1024
	maxValues = 64
	// The NVML report is one record (up to 16 MiB of JSON); the summary
	// judges every traced process against every device, so its lists
	// are bounded: devices, processes NVML listed on each, traced
	// processes, device events, and legacy worded lines.
	maxGPUs      = 256
	maxGPUProcs  = 1024
	maxTraced    = 1024
	maxGPUEvents = 1 << 16
	maxGPULines  = 1024
	// NVML samples kept whole for failed allocations (the recorder keeps
	// 256; a merge adds several recordings' up).
	maxGPUMoments = 4096
)

// keepName reports whether a new name of n bytes fits the name tables'
// bounds, its table holding size names of at most limit; it counts those
// that do not. A name replacing one already kept always does (it grows
// nothing).
func (rp *Replay) keepName(known bool, n, size, limit int) bool {
	if known {
		return true
	}
	if size >= limit || rp.names >= maxNames || rp.nameBytes+int64(n) > maxNameBytes {
		rp.NamesNotKept++
		return false
	}
	rp.names++
	rp.nameBytes += int64(n)
	return true
}

// counterSet keeps NVML samples within maxCounters: each track keeps at
// most one sample per quantum of time, and the quantum doubles (halving
// what is kept) whenever the set is full. Samples come in time order per
// track (the sampler's polls); ones that do not are kept the same way.
type counterSet struct {
	list    []model.Counter
	quantum uint64 // ns; 0 keeps every sample
	last    map[trackKey]uint64
	thinned uint64 // samples left out
}

type trackKey struct {
	device int
	name   string
}

func (s *counterSet) add(c model.Counter) {
	if s.last == nil {
		s.last = map[trackKey]uint64{}
	}
	k := trackKey{c.Device, c.Name}
	last, known := s.last[k]
	if !known && len(s.last) >= maxTracks {
		s.thinned++
		return
	}
	if s.quantum > 0 && known && c.TS/s.quantum == last/s.quantum {
		s.thinned++
		return
	}
	trimKeys(c.Values, maxValues)
	s.last[k] = c.TS
	s.list = append(s.list, c)
	for len(s.list) >= maxCounters {
		s.thin()
	}
}

// thin doubles the quantum and keeps, of each track, the first sample of
// every quantum.
func (s *counterSet) thin() {
	s.quantum = max(2*s.quantum, 1_000_000) // from 1 ms: the sampler's polls are ~100 ms apart
	clear(s.last)
	kept := s.list[:0]
	for _, c := range s.list {
		k := trackKey{c.Device, c.Name}
		if last, known := s.last[k]; known && c.TS/s.quantum == last/s.quantum {
			s.thinned++
			continue
		}
		s.last[k] = c.TS
		kept = append(kept, c)
	}
	clear(s.list[len(kept):]) // let the values of those left out go
	s.list = kept
}

// sorted is the samples kept, in time order (stable: a track's samples at
// the same time keep their order).
func (s *counterSet) sorted() []model.Counter {
	slices.SortStableFunc(s.list, func(a, b model.Counter) int { return cmp.Compare(a.TS, b.TS) })
	return s.list
}

// trimKeys keeps the first n keys of m by name (the same ones in every
// sample of a track) and returns how many it deleted.
func trimKeys[V any](m map[string]V, n int) int {
	if len(m) <= n {
		return 0
	}
	extra := slices.Sorted(maps.Keys(m))[n:]
	for _, k := range extra {
		delete(m, k)
	}
	return len(extra)
}

// boundGPU cuts the lists of g to the bounds and returns how many entries
// it left out.
func boundGPU(g *model.GPUReport) uint64 {
	var cut int
	g.GPUs = keepFirst(g.GPUs, maxGPUs, &cut)
	for i := range g.GPUs {
		d := &g.GPUs[i]
		d.Processes = keepFirst(d.Processes, maxGPUProcs, &cut)
		cut += trimKeys(d.ThrottlePolls, maxValues)
	}
	g.Traced = keepFirst(g.Traced, maxTraced, &cut)
	g.Events = keepFirst(g.Events, maxGPUEvents, &cut)
	g.Moments = keepFirst(g.Moments, maxGPUMoments, &cut)
	for i := range g.Moments {
		g.Moments[i].Processes = keepFirst(g.Moments[i].Processes, maxGPUProcs, &cut)
	}
	g.Devices = keepFirst(g.Devices, maxGPULines, &cut)
	g.Verdicts = keepFirst(g.Verdicts, maxGPULines, &cut)
	return uint64(cut)
}

// keepFirst is the first n of s, adding what it leaves out to cut.
func keepFirst[T any](s []T, n int, cut *int) []T {
	if len(s) <= n {
		return s
	}
	*cut += len(s) - n
	return s[:n]
}
