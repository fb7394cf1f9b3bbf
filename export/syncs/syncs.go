// Package syncs lists the places where a program made the host wait for the
// GPU, grouped by site and ranked by the time they cost: the `cudatap syncs`
// view.
package syncs

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Site is one place the host waited: same process, kind, API, Python line
// and native caller.
type Site struct {
	PID          uint32   `json:"pid"`
	Process      string   `json:"process"`
	Kind         string   `json:"kind"`
	Explicit     bool     `json:"explicit"`
	API          string   `json:"api"`
	Count        int      `json:"count"`
	BlockedNs    uint64   `json:"blocked_ns"`
	MaxBlockedNs uint64   `json:"max_blocked_ns"`
	QueuedOps    int      `json:"queued_ops_max"` // most GPU ops pending when it began
	Streams      []int    `json:"streams"`
	PythonLine   string   `json:"python_line,omitempty"` // innermost Python frame
	PythonStack  []string `json:"python_stack,omitempty"`
	NativeStack  []string `json:"native_stack,omitempty"`
	Hint         string   `json:"hint"`
}

// nativeFrames kept per site.
const nativeFrames = 6

// key is what makes two synchronizations one entry of the collector.
type key struct {
	pid            uint32
	kind           model.SyncKind
	api            event.API
	symbol         uint8
	stream         int32
	stack, pyStack int32
}

type entry struct {
	key
	count     int
	blocked   uint64
	maxBlock  uint64
	maxQueued int
}

// Collector aggregates synchronizations as the model hands them over: its
// memory is bounded by the distinct (process, kind, API, stream, stack)
// combinations, never by the number of syncs. It keeps them in the order
// first seen.
type Collector struct {
	index   map[key]int
	entries []entry
}

var _ model.Sink = (*Collector)(nil)

// NewCollector returns an empty collector.
func NewCollector() *Collector { return &Collector{index: map[key]int{}} }

// Sync adds s to its entry.
func (c *Collector) Sync(p *model.Process, s *model.Sync) {
	k := key{pid: p.PID, kind: s.Kind, api: s.API, symbol: s.Symbol, stream: int32(s.Stream), stack: s.Stack, pyStack: s.PyStack}
	i, ok := c.index[k]
	if !ok {
		i = len(c.entries)
		c.index[k] = i
		c.entries = append(c.entries, entry{key: k})
	}
	e := &c.entries[i]
	e.count++
	e.blocked += s.BlockedNs
	e.maxBlock = max(e.maxBlock, s.BlockedNs)
	e.maxQueued = max(e.maxQueued, s.QueuedOps)
}

func (*Collector) Call(*model.Process, *model.Call)             {}
func (*Collector) GPUOp(*model.Process, *model.GPUOp)           {}
func (*Collector) Dependency(*model.Process, *model.Dependency) {}
func (*Collector) Hold(*model.Process, *model.Hold)             {}

// Totals counts synchronizations split by whether the program asked for
// them (Kind.Explicit).
type Totals struct {
	Explicit, Implicit     int
	ExplicitNs, ImplicitNs uint64
}

// StreamTotals sums the synchronizations of process pid per stream id; key
// -1 holds the device-wide ones.
func (c *Collector) StreamTotals(pid uint32) map[int]Totals {
	out := map[int]Totals{}
	for i := range c.entries {
		e := &c.entries[i]
		if e.pid != pid {
			continue
		}
		k := int(e.stream)
		if k < 0 {
			k = -1
		}
		t := out[k]
		if e.kind.Explicit() {
			t.Explicit += e.count
			t.ExplicitNs += e.blocked
		} else {
			t.Implicit += e.count
			t.ImplicitNs += e.blocked
		}
		out[k] = t
	}
	return out
}

// Sites groups every synchronization c collected by site, most blocked
// time first; r names them.
func Sites(r *model.Result, c *Collector) []Site {
	var out []Site
	for _, p := range r.Processes {
		out = append(out, processSites(r, c, p)...)
	}
	sortSites(out)
	return out
}

// ProcessSites groups the synchronizations of process pid by site (kind,
// API, innermost Python line, innermost native caller), most blocked time
// first.
func ProcessSites(r *model.Result, c *Collector, pid uint32) []Site {
	for _, p := range r.Processes {
		if p.PID == pid {
			out := processSites(r, c, p)
			sortSites(out)
			return out
		}
	}
	return nil
}

func processSites(r *model.Result, c *Collector, p *model.Process) []Site {
	if c == nil {
		return nil
	}
	type siteKey struct {
		kind    model.SyncKind
		api, py string
		native  string
	}
	idx := map[siteKey]int{}
	var out []Site
	for i := range c.entries {
		e := &c.entries[i]
		if e.pid != p.PID {
			continue
		}
		py := describe.PyStack(r.Names, p, e.pyStack)
		native := describe.NativeStack(r.Names, p, e.stack, e.api, e.symbol, nativeFrames)
		k := siteKey{kind: e.kind, api: e.api.String()}
		if len(py) > 0 {
			k.py = py[0]
		}
		if len(native) > 0 {
			k.native = native[0]
		}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Site{PID: p.PID, Process: p.Label(), Kind: e.kind.String(), Explicit: e.kind.Explicit(),
				API: k.api, PythonLine: k.py, PythonStack: py, NativeStack: native, Hint: e.kind.Hint()})
		}
		st := &out[j]
		st.Count += e.count
		st.BlockedNs += e.blocked
		st.MaxBlockedNs = max(st.MaxBlockedNs, e.maxBlock)
		st.QueuedOps = max(st.QueuedOps, e.maxQueued)
		if s := int(e.stream); !slices.Contains(st.Streams, s) {
			st.Streams = append(st.Streams, s)
		}
	}
	return out
}

func sortSites(out []Site) {
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(b.BlockedNs, a.BlockedNs), cmp.Compare(b.Count, a.Count),
			cmp.Compare(a.PID, b.PID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.PythonLine, b.PythonLine),
			cmp.Compare(strings.Join(a.NativeStack, ";"), strings.Join(b.NativeStack, ";")))
	})
}

// Where is the site's most telling place: its Python line, else its
// innermost native frame outside CUDA, else "".
func (s *Site) Where() string {
	if s.PythonLine != "" {
		return s.PythonLine
	}
	if len(s.NativeStack) > 0 {
		return s.NativeStack[0]
	}
	return ""
}

// WriteJSON writes the sites and the loss account as one JSON document.
func WriteJSON(w io.Writer, r *model.Result, sites []Site) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Sites []Site      `json:"sites"`
		Drops model.Drops `json:"drops"`
		Lost  uint64      `json:"lost_events"`
	}{sites, r.Drops, r.Drops.Lost()})
}

// WriteText writes the sites for a terminal: a ranked table, then each
// site's stacks and fix hint.
func WriteText(w io.Writer, r *model.Result, sites []Site, top int) error {
	var total uint64
	for _, s := range sites {
		total += s.BlockedNs
	}
	fmt.Fprintf(w, "%d synchronization site(s), %s blocked in total\n\n", len(sites), dur(total))
	if top > 0 && len(sites) > top {
		sites = sites[:top]
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tBLOCKED\tCOUNT\tKIND\tAPI\tPID\tWHERE")
	for i, s := range sites {
		where := s.Where()
		if where == "" {
			where = "(no stack)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d\t%s\n", i+1, dur(s.BlockedNs), s.Count, s.Kind, s.API, s.PID, where)
	}
	tw.Flush()
	for i, s := range sites {
		fmt.Fprintf(w, "\n#%d %s in %s, %d× (%s blocked, max %s, up to %d GPU ops queued)\n", i+1, s.Kind, s.API, s.Count,
			dur(s.BlockedNs), dur(s.MaxBlockedNs), s.QueuedOps)
		for _, f := range s.PythonStack {
			fmt.Fprintf(w, "    py  %s\n", f)
		}
		for _, f := range s.NativeStack {
			fmt.Fprintf(w, "    c   %s\n", f)
		}
		fmt.Fprintf(w, "    fix: %s\n", s.Hint)
	}
	fmt.Fprintf(w, "\n%s\n", describe.Account(r))
	return nil
}

func dur(ns uint64) string {
	return time.Duration(ns).Round(time.Microsecond).String()
}
