package html

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// timeline is the page's data for the timeline script (report.js reads
// it; the field order of each slice array is listed there). Times are ns
// after T0, so that they stay exact in JavaScript numbers.
type timeline struct {
	T0      uint64     `json:"-"`
	From    int64      `json:"from"` // the time axis: [From, To]
	To      int64      `json:"to"`
	View    []int64    `json:"view,omitempty"` // the first view: where the GPU worked
	WallMs  float64    `json:"wall_ms"`        // Unix ms at T0
	Strings []string   `json:"strings"`
	Groups  []tlGroup  `json:"groups"`
	Rows    []tlRow    `json:"rows"`
	Window  tlWindow   `json:"window"`
	Host    [][]int64  `json:"host"`
	Ops     [][]int64  `json:"ops"`
	Syncs   [][]int64  `json:"syncs"`
	Holds   [][]int64  `json:"holds"`
	Agg     *tlAgg     `json:"agg,omitempty"`
	Series  []tlSeries `json:"series"`
	Gaps    [][]int64  `json:"gaps"` // [row, start, end]: the proven idle gaps listed in the gaps table

	strIdx map[string]int
}

type tlGroup struct {
	Label string `json:"label"`
	Rows  []int  `json:"rows"`
}

type tlRow struct {
	Label  string `json:"label"`
	Kind   string `json:"kind"` // host, gpu, counter
	Sub    string `json:"sub,omitempty"`
	PID    uint32 `json:"pid,omitempty"`
	Series []int  `json:"series,omitempty"` // drawn in this row
}

type tlWindow struct {
	From     int64 `json:"from"`
	To       int64 `json:"to"`
	Complete bool  `json:"complete"` // every slice is in detail
	Shown    int   `json:"shown"`
	Total    int64 `json:"total"`
	Dropped  int64 `json:"dropped"`
}

type tlAgg struct {
	Width int64      `json:"width"`
	Start int64      `json:"start"`
	Rows  []tlAggRow `json:"rows"`
}

// tlAggRow is a row's occupancy per bucket and category: base64 bytes,
// 0..255 for the share of the bucket covered.
type tlAggRow struct {
	Row  int               `json:"row"`
	Cats map[string]string `json:"cats"`
}

type tlSeries struct {
	Label  string       `json:"label"`
	Unit   string       `json:"unit"` // bytes, pct, ops, per_s, w, mhz
	Kind   string       `json:"kind"` // step, line
	Max    float64      `json:"max"`  // the axis top (0: the data's maximum)
	Points [][2]float64 `json:"points"`
}

var hostCatNames = [numCats]string{"launch", "copy", "sync", "mem", "other", "held"}
var gpuCatNames = [numCats]string{"kernel", "copy", "comm", "other"}

func (t *timeline) str(s string) int64 {
	if i, ok := t.strIdx[s]; ok {
		return int64(i)
	}
	t.strIdx[s] = len(t.Strings)
	t.Strings = append(t.Strings, s)
	return int64(len(t.Strings) - 1)
}

func (t *timeline) rel(ts uint64) int64 { return int64(ts) - int64(t.T0) }

func (c *Collector) timeline(r *model.Result, byPID map[uint32]*model.Process, start, end uint64) timeline {
	t := timeline{strIdx: map[string]int{}, Strings: []string{""}}
	t.strIdx[""] = 0
	t.T0 = start
	for _, ctr := range r.Counters {
		if ctr.TS != 0 && ctr.TS < t.T0 {
			t.T0 = ctr.TS
		}
		end = max(end, ctr.TS)
	}
	t.From, t.To = 0, t.rel(end)
	if c.gpuLast > c.gpuFirst {
		t.View = []int64{t.rel(c.gpuFirst), t.rel(c.gpuLast)}
	}
	t.WallMs = float64(int64(t.T0)+r.WallOffsetNs) / 1e6

	// Rows: per process its threads (in the order first seen), its
	// streams (by id), then its series; the NVML devices last. rowMap
	// maps the collector's rows to the page's.
	rowMap := make([]int, len(c.rows))
	for i := range rowMap {
		rowMap[i] = -1
	}
	pids := make([]uint32, 0, len(r.Processes))
	for _, p := range r.Processes {
		pids = append(pids, p.PID)
	}
	for _, ps := range c.order {
		if _, ok := byPID[ps.pid]; !ok {
			pids = append(pids, ps.pid)
		}
	}
	for _, pid := range pids {
		p := byPID[pid]
		ps := c.procs[pid]
		label := fmt.Sprintf("pid %d", pid)
		if p != nil {
			label = p.Label()
		}
		g := tlGroup{Label: label}
		var host, gpu []int
		for i, rw := range c.rows {
			if rw.key.pid != pid {
				continue
			}
			if rw.key.kind == rowHost {
				host = append(host, i)
			} else {
				gpu = append(gpu, i)
			}
		}
		slices.SortStableFunc(host, func(a, b int) int {
			ra, rb := c.rows[a], c.rows[b]
			if (ra.key.id == otherID) != (rb.key.id == otherID) {
				return cmp.Compare(rb.key.id, ra.key.id)
			}
			return cmp.Compare(ra.first, rb.first)
		})
		slices.SortStableFunc(gpu, func(a, b int) int {
			ra, rb := c.rows[a], c.rows[b]
			if (ra.key.id == otherID) != (rb.key.id == otherID) {
				return cmp.Compare(rb.key.id, ra.key.id)
			}
			return cmp.Compare(ra.key.id, rb.key.id)
		})
		for _, i := range host {
			rw := c.rows[i]
			l := threadLabel(r.Names, pid, rw)
			rowMap[i] = len(t.Rows)
			g.Rows = append(g.Rows, len(t.Rows))
			t.Rows = append(t.Rows, tlRow{Label: l, Kind: "host", PID: pid, Sub: "CUDA calls and the synchronizations that blocked"})
		}
		for _, i := range gpu {
			rw := c.rows[i]
			var devs []string
			for _, d := range model.DeviceBits(rw.devices) {
				devs = append(devs, deviceName(d))
			}
			row := tlRow{Label: streamLabel(p, rw), Kind: "gpu", PID: pid, Sub: strings.Join(devs, ", ")}
			if s := c.queueSeries(rw, &t); s != nil {
				row.Series = []int{len(t.Series)}
				t.Series = append(t.Series, *s)
			}
			rowMap[i] = len(t.Rows)
			g.Rows = append(g.Rows, len(t.Rows))
			t.Rows = append(t.Rows, row)
		}
		if ps != nil && ps.mem.series != nil {
			t.counterRow(&g, pid, "device memory in use (reserved through CUDA)", c.memSeries(ps, &t))
		}
		if ps != nil && ps.launches != nil {
			t.counterRow(&g, pid, "launches per second", c.rateSeries(ps.launches, &t, "launches/s"))
		}
		t.Groups = append(t.Groups, g)
	}
	t.nvml(r, c.opts.Buckets)

	// The slices in detail.
	d := &c.detail
	t.Window = tlWindow{From: t.From, To: t.To, Complete: !d.over && d.to == 0, Shown: d.n, Total: c.nSlices, Dropped: d.dropped}
	switch {
	case d.to != 0:
		t.Window.From, t.Window.To = t.rel(d.from), t.rel(d.to)
	case d.over:
		t.Window.From, t.Window.To = 0, 0 // no detail pass ran: nothing in detail
	}
	for i := range d.host {
		s := &d.host[i]
		name := s.api.String()
		if spec := event.Lookup(s.api); spec != nil {
			name = spec.Symbol(int(s.sym))
		}
		kernel := int64(-1)
		if s.fn != 0 && byPID[s.pid] != nil {
			kernel = t.str(describe.KernelOf(r.Names, byPID[s.pid], s.fn).Display)
		}
		var flags int64
		if s.pageable {
			flags |= 1
		}
		if s.captured {
			flags |= 2
		}
		cat := hostOther
		if spec := event.Lookup(s.api); spec != nil {
			cat = hostCategory(&model.Call{Sync: s.sync, BlockedNs: s.blocked}, spec.Class)
		}
		t.Host = append(t.Host, []int64{int64(rowMap[s.row]), t.rel(s.start), int64(s.end - s.start), t.str(name), int64(cat),
			int64(s.seq), t.str(syncName(s.sync)), int64(s.blocked), int64(s.stream), int64(s.bytes), int64(s.hold), int64(s.tid), flags, kernel})
	}
	for i := range d.ops {
		s := &d.ops[i]
		p := byPID[s.pid]
		k := opKey{pid: s.pid, kind: s.kind, fn: s.fn, api: s.api, copy: s.copy, pageable: s.pageable}
		name, kind := opName(r, p, k)
		timing := int64(2)
		switch {
		case s.measured:
			timing = 0
		case s.bound:
			timing = 1
		}
		gcat, _ := opCategory(s.kind)
		shape := int64(-1)
		if s.kind == model.OpKernel {
			shape = t.str(fmt.Sprintf("grid [%d, %d, %d], block [%d, %d, %d]", s.grid.X, s.grid.Y, s.grid.Z, s.block.X, s.block.Y, s.block.Z))
		}
		afterRow := int64(-1)
		if s.afterRow >= 0 {
			afterRow = int64(rowMap[s.afterRow])
		}
		t.Ops = append(t.Ops, []int64{int64(rowMap[s.row]), t.rel(s.start), int64(s.end - s.start), t.str(name), int64(gcat), timing,
			t.rel(s.enq), t.rel(s.proven), int64(s.id), int64(s.call), int64(s.tid), int64(s.bytes), int64(s.after), t.rel(s.afterStart),
			afterRow, int64(s.device), int64(s.stream), t.str(kind), shape})
	}
	for i := range d.syncs {
		s := &d.syncs[i]
		api := s.api.String()
		if spec := event.Lookup(s.api); spec != nil {
			api = spec.Symbol(int(s.sym))
		}
		t.Syncs = append(t.Syncs, []int64{int64(rowMap[s.row]), t.rel(s.start), int64(s.blocked), t.str(syncName(s.kind)),
			int64(s.stream), int64(s.queued), int64(s.polls), t.str(api), t.str(s.kind.Hint())})
	}
	for i := range d.holds {
		s := &d.holds[i]
		t.Holds = append(t.Holds, []int64{int64(rowMap[s.row]), t.rel(s.start), int64(s.end - s.start)})
	}
	if !t.Window.Complete {
		t.Agg = c.aggregates(&t, rowMap)
	}
	for i, rw := range c.rows {
		for _, g := range rw.gaps.top {
			t.Gaps = append(t.Gaps, []int64{int64(rowMap[i]), t.rel(g.CertainStart), t.rel(g.CertainEnd)})
		}
	}
	return t
}

func syncName(k model.SyncKind) string {
	if k == model.SyncNone {
		return ""
	}
	return k.String()
}

func threadLabel(n *model.Names, pid uint32, rw *row) string {
	if rw.key.id == otherID {
		return fmt.Sprintf("other threads (%d)", rw.merged)
	}
	name := ""
	if n != nil {
		name = n.Thread(pid, uint32(rw.key.id))
	}
	if name == "" {
		return fmt.Sprintf("thread %d", rw.key.id)
	}
	return fmt.Sprintf("%s (tid %d)", name, rw.key.id)
}

func (t *timeline) counterRow(g *tlGroup, pid uint32, label string, s *tlSeries) {
	if s == nil {
		return
	}
	g.Rows = append(g.Rows, len(t.Rows))
	t.Rows = append(t.Rows, tlRow{Label: label, Kind: "counter", PID: pid, Series: []int{len(t.Series)}})
	t.Series = append(t.Series, *s)
}

// bucketStart is bucket i's start on the page's clock.
func (c *Collector) bucketStart(t *timeline, i int) float64 { return float64(t.rel(c.clock.start(i))) }

// stepPoints turns per-bucket values into a step function's change points.
func stepPoints(c *Collector, t *timeline, vals []float64) [][2]float64 {
	var pts [][2]float64
	prev := math.NaN()
	last := 0
	for i, v := range vals {
		if v != 0 {
			last = i
		}
	}
	for i := 0; i <= min(last+1, len(vals)-1); i++ {
		if vals[i] != prev {
			pts = append(pts, [2]float64{c.bucketStart(t, i), vals[i]})
			prev = vals[i]
		}
	}
	return pts
}

// queueSeries is a stream's mean queue depth per bucket.
func (c *Collector) queueSeries(rw *row, t *timeline) *tlSeries {
	vals := rw.queue.values()
	w := float64(c.clock.width)
	out := make([]float64, len(vals))
	any := false
	for i, v := range vals {
		out[i] = math.Round(100*float64(v)/w) / 100
		any = any || v > 0
	}
	if !any {
		return nil
	}
	label := "ops queued or running (mean per bucket)"
	if rw.depth.bound {
		label = "ops enqueued and not yet proven complete (an upper bound of the queue; mean per bucket)"
	}
	return &tlSeries{Label: label, Unit: "ops", Kind: "step", Points: stepPoints(c, t, out)}
}

func (c *Collector) memSeries(ps *procState, t *timeline) *tlSeries {
	s := ps.mem.series
	var pts [][2]float64
	for i := range s.max {
		if s.last[i] == 0 {
			continue
		}
		at := c.bucketStart(t, i)
		pts = append(pts, [2]float64{at, float64(s.max[i])})
		if l := s.last[i] - 1; l != s.max[i] {
			pts = append(pts, [2]float64{c.bucketStart(t, i+1), float64(l)})
		}
	}
	if len(pts) == 0 {
		return nil
	}
	return &tlSeries{Label: "device memory in use (reserved through CUDA)", Unit: "bytes", Kind: "step", Points: pts}
}

func (c *Collector) rateSeries(s *sumSeries, t *timeline, label string) *tlSeries {
	w := float64(c.clock.width)
	vals := make([]float64, len(s.v))
	for i, v := range s.v {
		vals[i] = math.Round(float64(v) * 1e9 / w)
	}
	pts := stepPoints(c, t, vals)
	if len(pts) == 0 {
		return nil
	}
	return &tlSeries{Label: label, Unit: "per_s", Kind: "step", Points: pts}
}

// nvml adds a group per device with NVML samples: utilization, memory
// used (against the total), power and SM clock where sampled. Series past
// 4 points per bucket are reduced to each bucket's mean.
func (t *timeline) nvml(r *model.Result, buckets int) {
	byDev := map[int][]model.Counter{}
	names := map[int]string{}
	var devs []int
	for _, c := range r.Counters {
		if _, ok := byDev[c.Device]; !ok {
			devs = append(devs, c.Device)
			names[c.Device] = c.Name
		}
		byDev[c.Device] = append(byDev[c.Device], c)
	}
	slices.Sort(devs)
	for _, d := range devs {
		samples := byDev[d]
		g := tlGroup{Label: names[d] + " (NVML)"}
		var memTotal float64
		for _, s := range samples {
			memTotal = max(memTotal, s.Values["mem_total_bytes"])
		}
		for _, sd := range []struct {
			keys  []string
			label string
			unit  string
			max   float64
		}{
			{[]string{"gpu_util_pct", "mem_util_pct"}, "utilization (%)", "pct", 100},
			{[]string{"mem_used_bytes"}, "memory used (" + units.Bytes(uint64(memTotal)) + " total)", "bytes", memTotal},
			{[]string{"power_w"}, "power (W)", "w", 0},
			{[]string{"sm_clock_mhz"}, "SM clock (MHz)", "mhz", 0},
		} {
			row := tlRow{Label: sd.label, Kind: "counter"}
			for _, k := range sd.keys {
				var pts [][2]float64
				for _, s := range samples {
					if v, ok := s.Values[k]; ok {
						pts = append(pts, [2]float64{float64(t.rel(s.TS)), v})
					}
				}
				if len(pts) == 0 {
					continue
				}
				pts = reduce(pts, buckets)
				row.Series = append(row.Series, len(t.Series))
				t.Series = append(t.Series, tlSeries{Label: k, Unit: sd.unit, Kind: "line", Max: sd.max, Points: pts})
			}
			if len(row.Series) > 0 {
				g.Rows = append(g.Rows, len(t.Rows))
				t.Rows = append(t.Rows, row)
			}
		}
		if len(g.Rows) > 0 {
			t.Groups = append(t.Groups, g)
		}
	}
}

// reduce keeps at most 4*n points: the mean of each of n equal stretches.
func reduce(pts [][2]float64, n int) [][2]float64 {
	if len(pts) <= 4*n {
		return pts
	}
	first, last := pts[0][0], pts[len(pts)-1][0]
	w := (last - first) / float64(n)
	var out [][2]float64
	var sum, cnt float64
	bucket := 0
	flush := func() {
		if cnt > 0 {
			out = append(out, [2]float64{first + (float64(bucket)+0.5)*w, sum / cnt})
		}
		sum, cnt = 0, 0
	}
	for _, p := range pts {
		b := min(n-1, int((p[0]-first)/w))
		if b != bucket {
			flush()
			bucket = b
		}
		sum += p[1]
		cnt++
	}
	flush()
	return out
}

// aggregates is each row's occupancy per bucket, for the parts of the
// timeline outside the detail window.
func (c *Collector) aggregates(t *timeline, rowMap []int) *tlAgg {
	w := c.clock.width
	a := &tlAgg{Width: int64(w), Start: t.rel(c.clock.t0)}
	for i, rw := range c.rows {
		ar := tlAggRow{Row: rowMap[i], Cats: map[string]string{}}
		for cat, s := range rw.occ {
			if s == nil {
				continue
			}
			vals := s.values()
			last := -1
			for j, v := range vals {
				if v > 0 {
					last = j
				}
			}
			if last < 0 {
				continue
			}
			b := make([]byte, last+1)
			for j := range b {
				v := vals[j]
				if v == 0 {
					continue
				}
				b[j] = byte(min(255, max(1, (v*255+w-1)/w)))
			}
			name := hostCatNames[cat]
			if rw.key.kind == rowGPU {
				name = gpuCatNames[cat]
			}
			ar.Cats[name] = base64.StdEncoding.EncodeToString(b)
		}
		if len(ar.Cats) > 0 {
			a.Rows = append(a.Rows, ar)
		}
	}
	return a
}
