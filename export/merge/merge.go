// Package merge puts the recordings of a multi-host job on one timeline:
// `cudatap merge`. Each recording's timestamps are CLOCK_MONOTONIC of its
// own host. Recordings of one boot of one host (the same boot id in their
// headers) share that clock: they are put on it as they are, never
// shifted. Across hosts, the pair recorded at each start (CLOCK_REALTIME
// − CLOCK_MONOTONIC, Header.WallOffsetNs) places a recording as well as
// the hosts' wall clocks agree (NTP: milliseconds), and NCCL collectives
// bound that: the k-th collective of a communicator is one meeting of its
// ranks (export/straggler numbers them), and no rank can finish it before
// the last rank arrives. So for ranks i and j at each meeting, arrival_j +
// θ_j ≤ completion_i + θ_i, where completion_i is the earliest moment rank
// i's host knew the collective's GPU work complete (the return of the
// synchronization that proved it, model.GPUOp.ProvenBy) and θ the offset
// that puts a recording on the timeline. Each meeting bounds θ_i − θ_j
// from both sides; their intersection is the range the offset can be in.
// With GPU times measured (--gpu-times), a collective's kernels end within
// microseconds on every rank: the differences of their end times narrow
// the range to their spread. Of the range, the offset closest to the wall
// clocks' is taken (the wall clocks' own when they lie in it), and the
// range is stated: the true offset is in it, if the meetings are numbered
// alike on every rank. A recording that shares no meeting with the others
// stays where its wall clock puts it.
//
// Two passes over the recordings: Scan reads each once, keeping only what
// alignment needs (the first and the last meetings of each rank, bounded);
// Replay reads them again, interleaved by time through a
// replay.Transform each (the offset, and new pids where two hosts' pids
// collide), into one model and the usual sinks.
package merge

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// DefaultKeep is how many of each rank's first and of its last meetings
// alignment uses.
const DefaultKeep = 512

// firstPID is the first pid given to a process whose pid another input's
// process has: above any Linux pid (pid_max ≤ 2^22), below the trace's
// GPU track pids (export/chrome).
const firstPID = 1 << 22

// minStart keeps the timeline's first event at least this far from 0: a
// recording placed before the reference's clock began would otherwise go
// negative.
const minStart = int64(time.Second)

// implausibleSkew is a wall-clock disagreement NTP-synchronized hosts do
// not have: a refined offset that far from the wall clocks' is flagged.
const implausibleSkew = int64(100 * time.Millisecond)

// Methods of alignment.
const (
	MethodReference = "reference"   // the timeline's clock
	MethodSameBoot  = "same_boot"   // the reference's clock: the same boot of its host, not shifted
	MethodGPU       = "gpu_times"   // nearest the wall clocks within the spread of measured collective end times
	MethodHost      = "host_bounds" // nearest the wall clocks within the range host-side meetings allow
	MethodWall      = "wall_clock"  // the hosts' wall clocks only
)

// ErrSameRank: two inputs hold the same rank of one communicator.
var ErrSameRank = errors.New("two recordings hold the same rank")

// Options tune Scan.
type Options struct {
	Keep int // meetings kept at each end of each rank (DefaultKeep when 0)
	// Progress, if set, is called with the input being read and its bytes
	// read so far.
	Progress func(input int, done int64)
}

// Proc is one process of an input.
type Proc struct {
	PID             uint32 // on its host
	Rank, WorldSize int32  // WorldSize 0: no NCCL communicator seen
}

// Input is what Scan found in one recording.
type Input struct {
	Path      string
	Header    recording.Header
	Records   uint64
	Truncated string // why it ends early, "" when complete
	Procs     []Proc
	Ranks     []straggler.RankSeries
	Start     uint64 // first event, its host's clock
	OpsLost   int    // collectives not followed to completion (bounded memory)
}

// Alignment is where an input goes on the timeline.
type Alignment struct {
	// Theta is added to its timestamps to put them on the reference's
	// clock; Wall is what the wall clocks alone give.
	Theta, Wall int64
	// Lo and Hi bound the true offset, as the meetings allow it (Theta is
	// the offset nearest Wall between them); NoLo, NoHi: no bound on that
	// side. Both 0 on the reference's clock; unbounded for an input
	// placed by the wall clocks only.
	Lo, Hi     int64
	NoLo, NoHi bool
	// Uncertainty: how far the true offset can be from Theta (ns): 0 on
	// the reference's clock, -1 when unknown (a side unbounded).
	Uncertainty int64
	Method      string
	Meetings    int // meetings the estimate rests on
	Via         int // the input it was aligned to, -1 for none
	// Clock is the first input whose clock it shares (the same boot id),
	// itself when none before it does.
	Clock int
	Note  string
}

// Plan is how the inputs go on one timeline.
type Plan struct {
	Inputs    []Input
	Align     []Alignment
	Reference int
	// Base is added to every offset so that no timestamp falls before 0.
	Base int64
	// PIDs renumbers each input's processes whose pid an earlier input's
	// process has.
	PIDs []map[uint32]uint32
}

// Scan reads every input once and plans the merge. It refuses a file that
// is not a recording and two inputs holding the same rank of one
// communicator; a truncated input is used up to its cut (Input.Truncated
// says so).
func Scan(paths []string, opts Options) (*Plan, error) {
	keep := opts.Keep
	if keep <= 0 {
		keep = DefaultKeep
	}
	p := &Plan{}
	for i, path := range paths {
		var progress func(int64)
		if opts.Progress != nil {
			progress = func(n int64) { opts.Progress(i, n) }
		}
		in, err := scanOne(path, keep, progress)
		if err != nil {
			return nil, err
		}
		p.Inputs = append(p.Inputs, in)
	}
	if err := p.checkRanks(); err != nil {
		return nil, err
	}
	p.planPIDs()
	p.align()
	return p, nil
}

func scanOne(path string, keep int, progress func(int64)) (Input, error) {
	in := Input{Path: path}
	f, err := os.Open(path)
	if err != nil {
		return in, fmt.Errorf("open recording: %w", err)
	}
	defer f.Close()
	series := straggler.NewSeries(keep)
	m := model.New(series)
	rp, err := replay.ReadEvents(f, m, progress)
	res := m.Finish()
	switch {
	case rp.Header.Version == 0 && errors.Is(err, recording.ErrTruncated):
		return in, fmt.Errorf("%s: %w: nothing in it can be merged; leave it out", path, err)
	case rp.Header.Version == 0 && err != nil:
		return in, fmt.Errorf("%s: %w: give the .cudatap files `cudatap record -o FILE.cudatap` wrote", path, err)
	case errors.Is(err, recording.ErrTruncated):
		in.Truncated = fmt.Sprintf("%v (%d records read)", err, rp.Records)
	case err != nil:
		return in, fmt.Errorf("%s: %w after %d records: the file is damaged; merge the others without it", path, err, rp.Records)
	}
	in.Header, in.Records, in.Start = rp.Header, rp.Records, res.Start
	for _, pr := range res.Processes {
		if pr.Other {
			continue // the processes past the model's bound: no pid of the recording's
		}
		in.Procs = append(in.Procs, Proc{PID: pr.PID, Rank: pr.Rank, WorldSize: pr.WorldSize})
	}
	in.Ranks, in.OpsLost = series.Ranks(), series.OpsLost
	return in, nil
}

// checkRanks refuses two inputs with the same rank of one communicator.
func (p *Plan) checkRanks() error {
	type key struct {
		comm uint64
		rank int
	}
	seen := map[key]int{}
	for i, in := range p.Inputs {
		for _, rs := range in.Ranks {
			k := key{rs.Comm, rs.Rank}
			if j, dup := seen[k]; dup && j != i {
				return fmt.Errorf("%w: %s and %s both hold rank %d of NCCL communicator %016x: the same process recorded twice, or one file given twice; give each rank's recording once",
					ErrSameRank, p.Inputs[j].Path, in.Path, rs.Rank, rs.Comm)
			}
			seen[k] = i
		}
	}
	return nil
}

// planPIDs keeps every pid no earlier input has, and gives the others
// fresh ones.
func (p *Plan) planPIDs() {
	used := map[uint32]bool{}
	for _, in := range p.Inputs {
		for _, pr := range in.Procs {
			used[pr.PID] = true
		}
	}
	next := uint32(firstPID)
	taken := map[uint32]bool{}
	p.PIDs = make([]map[uint32]uint32, len(p.Inputs))
	for i, in := range p.Inputs {
		m := map[uint32]uint32{}
		for _, pr := range in.Procs {
			if !taken[pr.PID] {
				taken[pr.PID] = true
				continue
			}
			for used[next] || taken[next] {
				next++
			}
			m[pr.PID] = next
			taken[next] = true
			next++
		}
		p.PIDs[i] = m
	}
}

// TracePID is where pid of input i is in the merged trace.
func (p *Plan) TracePID(i int, pid uint32) uint32 {
	if q, ok := p.PIDs[i][pid]; ok {
		return q
	}
	return pid
}

// Transforms put each input on the timeline (replay.LoadInputs).
func (p *Plan) Transforms() []replay.Transform {
	out := make([]replay.Transform, len(p.Inputs))
	for i, in := range p.Inputs {
		out[i] = replay.Transform{ShiftNs: p.Align[i].Theta + p.Base, PIDs: p.PIDs[i]}
		if len(p.Inputs) > 1 {
			// NVML devices of every host apart: host i's GPU d is 100·i+d.
			out[i].Devices = 100 * i
			out[i].DevicePrefix = hostName(in) + ": "
		}
	}
	return out
}

// WallOffsetNs converts the timeline to Unix time (unix = t + WallOffsetNs).
func (p *Plan) WallOffsetNs() int64 {
	return p.Inputs[p.Reference].Header.WallOffsetNs - p.Base
}

func hostName(in Input) string {
	if in.Header.Host != "" {
		return in.Header.Host
	}
	return in.Path
}

// pair is what the meetings of two inputs say about θ_i − θ_j.
type pair struct {
	lo, hi       int64 // host-side bounds
	hasLo, hasHi bool
	bounds       int     // meetings that bounded it
	gpu          []int64 // per meeting: difference of measured GPU end times
	mismatched   int     // meetings whose ranks called different collectives
}

// sideAt is one input's side of one meeting: its latest arrival, its
// earliest proven completion, a measured GPU end.
type sideAt struct {
	api              event.API
	arrive, complete uint64
	gpuEnd           uint64
	hasArrive, mixed bool
}

// bounding reports whether a collective's completion on any rank waits
// for every rank's arrival: each rank's result depends on all ranks'
// inputs. (A broadcast root or a reduce's non-roots may finish first.)
func bounding(api event.API) bool {
	return api == event.NcclAllReduce || api == event.NcclAllGather || api == event.NcclReduceScatter
}

// sides gathers, per communicator and meeting, the side of the ranks of
// one clock (the inputs of one boot, or one input).
func sides(ranks []straggler.RankSeries) map[uint64]map[int]*sideAt {
	out := map[uint64]map[int]*sideAt{}
	for _, rs := range ranks {
		byseq := out[rs.Comm]
		if byseq == nil {
			byseq = map[int]*sideAt{}
			out[rs.Comm] = byseq
		}
		for _, pt := range rs.Points {
			if pt.Captured {
				continue
			}
			s := byseq[pt.Seq]
			if s == nil {
				s = &sideAt{api: pt.API}
				byseq[pt.Seq] = s
			}
			if s.api != pt.API {
				s.mixed = true
			}
			if !s.hasArrive || pt.Arrive > s.arrive {
				s.arrive, s.hasArrive = pt.Arrive, true
			}
			if pt.Complete != 0 && (s.complete == 0 || pt.Complete < s.complete) {
				s.complete = pt.Complete
			}
			if pt.GPUEnd != 0 && s.gpuEnd == 0 {
				s.gpuEnd = pt.GPUEnd
			}
		}
	}
	return out
}

func compare(a, b map[uint64]map[int]*sideAt) *pair {
	pr := &pair{lo: math.MinInt64, hi: math.MaxInt64}
	met := false
	for comm, as := range a {
		bs := b[comm]
		if bs == nil {
			continue
		}
		for seq, sa := range as {
			sb := bs[seq]
			if sb == nil {
				continue
			}
			met = true
			if sa.mixed || sb.mixed || sa.api != sb.api {
				pr.mismatched++
				continue
			}
			if !bounding(sa.api) {
				continue
			}
			used := false
			// θa − θb ≥ arrive_b − complete_a, ≤ complete_b − arrive_a.
			if sa.complete != 0 {
				pr.lo, pr.hasLo, used = max(pr.lo, int64(sb.arrive)-int64(sa.complete)), true, true
			}
			if sb.complete != 0 {
				pr.hi, pr.hasHi, used = min(pr.hi, int64(sb.complete)-int64(sa.arrive)), true, true
			}
			if used {
				pr.bounds++
			}
			if sa.gpuEnd != 0 && sb.gpuEnd != 0 {
				pr.gpu = append(pr.gpu, int64(sb.gpuEnd)-int64(sa.gpuEnd))
			}
		}
	}
	if !met {
		return nil
	}
	return pr
}

// span is a range of offsets; an unbounded side is math.MinInt64 or
// math.MaxInt64.
type span struct{ lo, hi int64 }

func (s span) width() int64 {
	if s.lo == math.MinInt64 || s.hi == math.MaxInt64 {
		return math.MaxInt64
	}
	return s.hi - s.lo
}

// nearest is the offset of s nearest w.
func (s span) nearest(w int64) int64 { return min(max(w, s.lo), s.hi) }

// satAdd adds, an unbounded side staying unbounded.
func satAdd(a, b int64) int64 {
	switch {
	case a == math.MaxInt64 || b == math.MaxInt64:
		return math.MaxInt64
	case a == math.MinInt64 || b == math.MinInt64:
		return math.MinInt64
	}
	return a + b
}

// edge is what the meetings of two clocks allow for θ_i − θ_j.
type edge struct {
	span
	method   string
	meetings int
	note     string
}

// estimate turns what two clocks' meetings say into the range they
// allow, or nil with the reason.
func (pr *pair) estimate() (*edge, string) {
	host := span{pr.lo, pr.hi} // unbounded where !hasLo, !hasHi
	if pr.hasLo && pr.hasHi && pr.lo > pr.hi {
		msg := fmt.Sprintf("their meetings contradict each other by %s (no offset lets every rank finish each collective after the last arrival)", units.Offset(uint64(pr.lo-pr.hi)))
		if pr.mismatched > 0 {
			msg += fmt.Sprintf("; %d meetings were different collectives on different ranks", pr.mismatched)
		}
		return nil, msg + ": misnumbered meetings, as when a recording began after its job's first collectives?"
	}
	if len(pr.gpu) > 0 {
		gpu := span{slices.Min(pr.gpu), slices.Max(pr.gpu)}
		if gpu.hi >= host.lo && gpu.lo <= host.hi {
			return &edge{span: span{max(gpu.lo, host.lo), min(gpu.hi, host.hi)}, method: MethodGPU, meetings: len(pr.gpu)}, ""
		}
		if pr.bounds > 0 {
			note := fmt.Sprintf("the measured GPU end times (%s to %s apart) fall outside what the host-side meetings allow [%v, %v]: the host-side range is used",
				signed(gpu.lo), signed(gpu.hi), bound(host.lo), bound(host.hi))
			return &edge{span: host, method: MethodHost, meetings: pr.bounds, note: note}, ""
		}
	}
	if pr.bounds > 0 {
		return &edge{span: host, method: MethodHost, meetings: pr.bounds}, ""
	}
	if pr.mismatched > 0 {
		return nil, fmt.Sprintf("%d shared meetings were different collectives on different ranks: misnumbered meetings, as when a recording began after its job's first collectives?", pr.mismatched)
	}
	return nil, "they share meetings, but none an all-reduce, all-gather or reduce-scatter proven complete"
}

// bound writes an end of a range, ∞ when unbounded.
func bound(v int64) string {
	switch v {
	case math.MinInt64:
		return "-∞"
	case math.MaxInt64:
		return "+∞"
	}
	return signed(v)
}

// align picks the reference, puts every input of its boot on its clock,
// and chains the other clocks to it through the meetings, the narrowest
// ranges first; each takes the offset nearest the wall clocks' that its
// range allows.
func (p *Plan) align() {
	n := len(p.Inputs)
	p.Reference = 0
	for i, in := range p.Inputs {
		if slices.ContainsFunc(in.Procs, func(pr Proc) bool { return pr.WorldSize > 0 && pr.Rank == 0 }) {
			p.Reference = i
			break
		}
	}
	// Clocks: the inputs of one boot are one clock, named by its first.
	clock := make([]int, n)
	for i, in := range p.Inputs {
		clock[i] = i
		for j := range i {
			if in.Header.SameClock(p.Inputs[j].Header) {
				clock[i] = clock[j]
				break
			}
		}
	}
	ref, refClock := p.Inputs[p.Reference].Header.WallOffsetNs, clock[p.Reference]
	p.Align = make([]Alignment, n)
	for i, in := range p.Inputs {
		// unix = t + wall: on the reference's clock, t + wall_i − wall_ref.
		w := in.Header.WallOffsetNs - ref
		p.Align[i] = Alignment{Theta: w, Wall: w, Lo: math.MinInt64, Hi: math.MaxInt64, NoLo: true, NoHi: true,
			Uncertainty: -1, Method: MethodWall, Via: -1, Clock: clock[i]}
	}

	// What each clock's ranks did at the meetings.
	ranks := make([][]straggler.RankSeries, n)
	for i, in := range p.Inputs {
		ranks[clock[i]] = append(ranks[clock[i]], in.Ranks...)
	}
	sd := make([]map[uint64]map[int]*sideAt, n)
	for c := range n {
		if clock[c] == c {
			sd[c] = sides(ranks[c])
		}
	}
	p.checkShared(clock)

	edges := make([][]*edge, n)
	why := make([]string, n) // why a clock has no range
	for i := range n {
		edges[i] = make([]*edge, n)
	}
	for i := range n {
		for j := i + 1; j < n; j++ {
			if clock[i] != i || clock[j] != j {
				continue
			}
			pr := compare(sd[i], sd[j])
			if pr == nil {
				continue
			}
			e, reason := pr.estimate()
			if e == nil {
				for _, k := range []int{i, j} {
					other := p.Inputs[i+j-k].Path
					why[k] = cmp.Or(why[k], fmt.Sprintf("with %s: %s", other, reason))
				}
				continue
			}
			edges[i][j] = e
			edges[j][i] = &edge{span: span{-e.hi, -e.lo}, method: e.method, meetings: e.meetings, note: e.note}
			if e.lo == math.MinInt64 {
				edges[j][i].hi = math.MaxInt64
			}
			if e.hi == math.MaxInt64 {
				edges[j][i].lo = math.MinInt64
			}
		}
	}
	// Dijkstra from the reference's clock, by the width of the range.
	rng := make([]span, n) // θ of each clock, as far as the meetings allow
	done := make([]bool, n)
	dist := make([]int64, n)
	via := make([]*edge, n)
	from := make([]int, n)
	for i := range dist {
		dist[i] = -1 // unreached
	}
	rng[refClock], dist[refClock] = span{0, 0}, 0
	for {
		cur := -1
		for i := range n {
			if !done[i] && dist[i] >= 0 && (cur < 0 || dist[i] < dist[cur]) {
				cur = i
			}
		}
		if cur < 0 {
			break
		}
		done[cur] = true
		for j := range n {
			e := edges[cur][j]
			if e == nil || done[j] {
				continue
			}
			if d := satAdd(dist[cur], e.width()); dist[j] < 0 || d < dist[j] {
				// θ_cur − θ_j ∈ [e.lo, e.hi].
				dist[j], via[j], from[j] = d, e, cur
				rng[j] = span{satAdd(rng[cur].lo, -e.hi), satAdd(rng[cur].hi, -e.lo)}
				if e.hi == math.MaxInt64 || rng[cur].lo == math.MinInt64 {
					rng[j].lo = math.MinInt64
				}
				if e.lo == math.MinInt64 || rng[cur].hi == math.MaxInt64 {
					rng[j].hi = math.MaxInt64
				}
			}
		}
	}
	for i := range p.Inputs {
		a := &p.Align[i]
		c := clock[i]
		switch {
		case i == p.Reference:
			a.Theta, a.Lo, a.Hi, a.NoLo, a.NoHi, a.Uncertainty, a.Method = 0, 0, 0, false, false, 0, MethodReference
			continue
		case c == refClock:
			a.Theta, a.Lo, a.Hi, a.NoLo, a.NoHi, a.Uncertainty, a.Method, a.Via = 0, 0, 0, false, false, 0, MethodSameBoot, p.Reference
			continue
		case via[c] != nil:
			// The clock's wall offset is its first input's.
			wall := p.Align[c].Wall
			r := rng[c]
			a.Theta = r.nearest(wall)
			a.Lo, a.Hi, a.NoLo, a.NoHi = r.lo, r.hi, r.lo == math.MinInt64, r.hi == math.MaxInt64
			a.Method, a.Meetings, a.Via, a.Note = via[c].method, via[c].meetings, from[c], appendNote(a.Note, via[c].note)
			if a.NoLo || a.NoHi {
				a.Uncertainty = -1
				if a.Theta == wall {
					a.Method = MethodWall
				}
				a.Note = appendNote(a.Note, fmt.Sprintf("the meetings bound the offset from one side only, [%s, %s] (a rank's collectives were never proven complete: no synchronization after them was traced)",
					bound(r.lo), bound(r.hi)))
			} else {
				a.Uncertainty = max(a.Theta-r.lo, r.hi-a.Theta)
			}
			if c != i {
				a.Note = appendNote(a.Note, fmt.Sprintf("on the clock of %s (the same boot of its host), shifted alike", p.Inputs[c].Path))
			}
			if skew := a.Theta - a.Wall; skew > implausibleSkew || -skew > implausibleSkew {
				a.Note = appendNote(a.Note, fmt.Sprintf("the meetings put it %v from where the wall clocks did: unless the hosts' clocks are far apart, its meetings may be misnumbered (a recording that began after the job's first collectives)", signed(skew)))
			}
			continue
		}
		// Placed by the wall clocks: its clock's first input's, alike.
		a.Theta = p.Align[c].Wall
		switch {
		case why[c] != "":
			a.Note = appendNote(a.Note, "no usable meeting point: "+why[c]+"; kept where the wall clocks put it")
		case len(ranks[c]) == 0:
			a.Note = appendNote(a.Note, "no meeting point: no NCCL communicator was seen in it (ncclCommInitRank not traced); placed by the wall clocks only, so the uncertainty is how well the hosts' clocks were synchronized (NTP: typically milliseconds)")
		default:
			a.Note = appendNote(a.Note, "no meeting point: its NCCL communicators have no rank in the other recordings; placed by the wall clocks only, so the uncertainty is how well the hosts' clocks were synchronized (NTP: typically milliseconds)")
		}
		if c != i {
			a.Note = appendNote(a.Note, fmt.Sprintf("on the clock of %s (the same boot of its host), shifted alike", p.Inputs[c].Path))
		}
	}
	// No event before minStart.
	first := int64(math.MaxInt64)
	for i, in := range p.Inputs {
		if in.Start != 0 {
			first = min(first, int64(in.Start)+p.Align[i].Theta)
		}
	}
	if first < minStart {
		p.Base = minStart - first
	}
}

// checkShared notes, on an input that shares another's clock, meetings
// that contradict that: no offset but 0 is possible, so they are
// misnumbered.
func (p *Plan) checkShared(clock []int) {
	for j := range p.Inputs {
		for i := range j {
			if clock[i] != clock[j] {
				continue
			}
			pr := compare(sides(p.Inputs[i].Ranks), sides(p.Inputs[j].Ranks))
			if pr == nil {
				continue
			}
			off := int64(0)
			switch {
			case pr.hasLo && pr.lo > 0:
				off = pr.lo
			case pr.hasHi && pr.hi < 0:
				off = pr.hi
			default:
				continue
			}
			a := &p.Align[j]
			a.Note = appendNote(a.Note, fmt.Sprintf("its NCCL meetings with %s would need it shifted %v, but the two share one clock (the same boot id): misnumbered meetings, as when a recording began after its job's first collectives?",
				p.Inputs[i].Path, signed(-off)))
		}
	}
}

func appendNote(note, more string) string {
	switch {
	case more == "":
		return note
	case note == "":
		return more
	}
	return note + "; " + more
}

// PID is a process of a merged trace: its pid there and on its host.
type PID struct {
	PID     uint32 `json:"pid"`
	HostPID uint32 `json:"host_pid"`
}

// InputInfo is what a merged trace says about one of its recordings.
type InputInfo struct {
	File      string `json:"file"`
	Host      string `json:"host,omitempty"`
	Reference bool   `json:"reference,omitempty"`
	PIDs      []PID  `json:"pids"`
	Ranks     []int  `json:"ranks,omitempty"`
	// OffsetNs was added to its timestamps; WallClockOffsetNs is what the
	// hosts' wall clocks alone would have added; SkewNs the difference:
	// how far its wall clock was off the reference's, as measured.
	OffsetNs          int64 `json:"offset_ns"`
	WallClockOffsetNs int64 `json:"wall_clock_offset_ns"`
	SkewNs            int64 `json:"skew_ns"`
	// OffsetMinNs and OffsetMaxNs bound the true offset as the NCCL
	// meetings allow it (null: unbounded on that side); OffsetNs is the
	// one between them nearest WallClockOffsetNs. UncertaintyNs: how far
	// the truth can be from OffsetNs (null: unknown).
	OffsetMinNs   *int64 `json:"offset_min_ns"`
	OffsetMaxNs   *int64 `json:"offset_max_ns"`
	UncertaintyNs *int64 `json:"uncertainty_ns"`
	Method        string `json:"method"`
	Meetings      int    `json:"meetings,omitempty"`
	AlignedTo     string `json:"aligned_to,omitempty"`
	// BootID is its host's boot id; SharesClockWith the input whose clock
	// it is on (the same boot id), shifted alike.
	BootID          string `json:"boot_id,omitempty"`
	SharesClockWith string `json:"shares_clock_with,omitempty"`
	Note            string `json:"note,omitempty"`
	Truncated       string `json:"truncated,omitempty"`
}

// Info is what a merged trace says about its making: in a Chrome trace's
// "cudatap" block ("merge") and a merged recording's header.
type Info struct {
	Reference string      `json:"reference"`
	Clock     string      `json:"clock"`
	Inputs    []InputInfo `json:"inputs"`
}

// Info describes the plan.
func (p *Plan) Info() *Info {
	ref := p.Inputs[p.Reference]
	info := &Info{Reference: ref.Path,
		Clock: fmt.Sprintf("CLOCK_MONOTONIC of %s (the reference)", hostName(ref))}
	if p.Base != 0 {
		info.Clock += fmt.Sprintf(" + %d ns", p.Base)
	}
	for i, in := range p.Inputs {
		a := p.Align[i]
		ii := InputInfo{File: in.Path, Host: in.Header.Host, Reference: i == p.Reference, Ranks: ranksOf(in),
			OffsetNs: a.Theta + p.Base, WallClockOffsetNs: a.Wall + p.Base, SkewNs: a.Theta - a.Wall, Method: a.Method,
			Meetings: a.Meetings, Note: a.Note, Truncated: in.Truncated}
		if a.Uncertainty >= 0 {
			u := a.Uncertainty
			ii.UncertaintyNs = &u
		}
		if !a.NoLo {
			lo := a.Lo + p.Base
			ii.OffsetMinNs = &lo
		}
		if !a.NoHi {
			hi := a.Hi + p.Base
			ii.OffsetMaxNs = &hi
		}
		if a.Via >= 0 {
			ii.AlignedTo = p.Inputs[a.Via].Path
		}
		ii.BootID = in.Header.BootID
		if a.Clock != i {
			ii.SharesClockWith = p.Inputs[a.Clock].Path
		}
		for _, pr := range in.Procs {
			ii.PIDs = append(ii.PIDs, PID{PID: p.TracePID(i, pr.PID), HostPID: pr.PID})
		}
		info.Inputs = append(info.Inputs, ii)
	}
	return info
}

func ranksOf(in Input) []int {
	var out []int
	for _, pr := range in.Procs {
		if pr.WorldSize > 0 && !slices.Contains(out, int(pr.Rank)) {
			out = append(out, int(pr.Rank))
		}
	}
	for _, rs := range in.Ranks {
		if !slices.Contains(out, rs.Rank) {
			out = append(out, rs.Rank)
		}
	}
	slices.Sort(out)
	return out
}

// JSON is the info as a merged trace carries it.
func (i *Info) JSON() json.RawMessage {
	b, _ := json.Marshal(i)
	return b
}

// ReadInfo is the merge info of a recording's header; nil when the
// recording was not made by `cudatap merge`.
func ReadInfo(h recording.Header) (*Info, error) {
	if len(h.Merge) == 0 {
		return nil, nil
	}
	var info Info
	if err := json.Unmarshal(h.Merge, &info); err != nil {
		return nil, fmt.Errorf("merge info in the header: %w", err)
	}
	return &info, nil
}

// Origins names each process of a merged trace by its host and real pid
// (export/chrome).
func (i *Info) Origins() map[uint32]chrome.Origin {
	if i == nil {
		return nil
	}
	out := map[uint32]chrome.Origin{}
	for _, in := range i.Inputs {
		host := cmp.Or(in.Host, in.File)
		for _, pr := range in.PIDs {
			out[pr.PID] = chrome.Origin{Host: host, PID: pr.HostPID}
		}
	}
	return out
}

// Where names each process of a merged trace for the text reports: "pid
// 4123 on nodeB".
func (i *Info) Where() map[uint32]string {
	out := map[uint32]string{}
	for pid, o := range i.Origins() {
		out[pid] = fmt.Sprintf("pid %d on %s", o.PID, o.Host)
	}
	return out
}

// Header is the header of the merged recording.
func (p *Plan) Header(tool string) recording.Header {
	h := recording.NewHeader(tool, p.WallOffsetNs())
	var hosts []string
	for _, in := range p.Inputs {
		if in.Header.Host != "" && !slices.Contains(hosts, in.Header.Host) {
			hosts = append(hosts, in.Header.Host)
		}
	}
	h.Host = strings.Join(hosts, ",")
	h.Merge = p.Info().JSON()
	return h
}

// Report writes, for the terminal, where each input went and how sure
// that is.
func (p *Plan) Report(w io.Writer) {
	ref := p.Inputs[p.Reference]
	fmt.Fprintf(w, "cudatap: merging %d recording(s) on the clock of %s (host %s)\n", len(p.Inputs), ref.Path, hostName(ref))
	for i, in := range p.Inputs {
		a := p.Align[i]
		fmt.Fprintf(w, "  %s (host %s", in.Path, hostName(in))
		var pids []string
		for _, pr := range in.Procs {
			if q := p.TracePID(i, pr.PID); q != pr.PID {
				pids = append(pids, fmt.Sprintf("%d as %d", pr.PID, q))
			} else {
				pids = append(pids, fmt.Sprint(pr.PID))
			}
		}
		if len(pids) > 0 {
			fmt.Fprintf(w, ", pid %s", strings.Join(pids, ", "))
		}
		if r := ranksOf(in); len(r) > 0 {
			fmt.Fprintf(w, ", rank %s", strings.Trim(fmt.Sprint(r), "[]"))
		}
		fmt.Fprint(w, "): ")
		switch {
		case a.Method == MethodReference:
			fmt.Fprint(w, "the reference")
		case a.Method == MethodSameBoot:
			fmt.Fprintf(w, "not shifted: recorded in the same boot of the same host as %s (boot id %s), so on the same clock", p.Inputs[a.Via].Path, in.Header.BootID)
		case a.Method == MethodWall && a.NoLo && a.NoHi:
			fmt.Fprintf(w, "shifted %s by the wall clocks only, uncertainty unknown", signed(a.Theta))
		default:
			how := "host-side bounds: a rank finishes a collective only after the last rank arrives"
			if a.Method == MethodGPU {
				how = "measured GPU end times of the collectives"
			}
			fmt.Fprintf(w, "shifted %s, ", signed(a.Theta))
			if a.Theta == a.Wall {
				fmt.Fprint(w, "the wall clocks' offset, ")
			} else {
				fmt.Fprintf(w, "the nearest to the wall clocks' offset (%s, %s off) ", signed(a.Wall), signed(a.Wall-a.Theta))
			}
			fmt.Fprintf(w, "within [%s, %s], the range %d NCCL meeting(s) with %s allow (%s)", bound(a.Lo), bound(a.Hi), a.Meetings, p.Inputs[a.Via].Path, how)
			if a.Uncertainty >= 0 {
				fmt.Fprintf(w, ": the true offset is within ±%s of it", units.Offset(uint64(a.Uncertainty)))
			}
		}
		fmt.Fprintln(w)
		if a.Note != "" {
			fmt.Fprintf(w, "    %s\n", a.Note)
		}
		if in.Truncated != "" {
			fmt.Fprintf(w, "    truncated: %s; merged up to the cut\n", in.Truncated)
		}
		if in.OpsLost > 0 {
			fmt.Fprintf(w, "    %d collectives not followed to their completion (too many pending)\n", in.OpsLost)
		}
	}
	if p.Base != 0 {
		fmt.Fprintf(w, "  (every timestamp moved by a further %s: a recording began before the reference's clock did)\n", signed(p.Base))
	}
}

// signed writes a shift to the µs, with its sign.
func signed(ns int64) string { return units.SignedOffset(ns) }
