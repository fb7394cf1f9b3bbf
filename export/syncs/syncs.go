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

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Site is one place the host waited: same process, kind and API, at the
// same line of the user's code, on threads of the same kind (those that
// launch work, or background ones).
type Site struct {
	PID      uint32 `json:"pid"`
	Process  string `json:"process"`
	Kind     string `json:"kind"`
	Explicit bool   `json:"explicit"`
	API      string `json:"api"`
	// Site is the innermost frame of the user's code (UserSite): Python
	// first, else native. UserFrame is false when the stacks hold none (a
	// library's own thread): Site is then their innermost frame. Via is the
	// innermost frame when it is not Site: where the CUDA call was made.
	Site      string `json:"site"`
	UserFrame bool   `json:"user_frame"`
	Via       string `json:"via,omitempty"`
	Count     int    `json:"count"`
	// BlockedNs counts each nanosecond of a thread's blocked time once:
	// time a thread was already counted as blocked in (a sync nested in
	// another, overlapping poll loops) is OverlappedNs, not BlockedNs.
	BlockedNs    uint64 `json:"blocked_ns"`
	OverlappedNs uint64 `json:"overlapped_ns"`
	MaxBlockedNs uint64 `json:"max_blocked_ns"`
	QueuedOps    int    `json:"queued_ops_max"` // most GPU ops pending when it began
	Streams      []int  `json:"streams"`
	// Threads that waited here ("name (tid N)"); Background is their role
	// when they are background threads (RolePoller, RoleBackground): their
	// waits did not hold up the threads that launch work.
	Threads     []string `json:"threads"`
	Background  Role     `json:"background,omitempty"`
	PythonLine  string   `json:"python_line,omitempty"` // innermost Python frame
	PythonStack []string `json:"python_stack,omitempty"`
	NativeStack []string `json:"native_stack,omitempty"` // every frame, innermost first
	Hint        string   `json:"hint"`
}

// allFrames: a site keeps its whole native stack.
const allFrames = 1 << 30

// key is what makes two synchronizations one entry of the collector.
type key struct {
	pid, tid       uint32
	kind           model.SyncKind
	api            event.API
	symbol         uint8
	stream         int32
	stack, pyStack int32
	other          bool // the synchronizations past maxEntries, by process, kind and API only
}

// maxEntries bounds the distinct synchronizations the collector tells
// apart: a recording can give each its own thread and stack. Past it they
// are told apart by process, kind and API only, as one site that says so
// (otherSite).
const maxEntries = 1 << 16

// otherSite is the site of the synchronizations past maxEntries.
const otherSite = "(synchronizations past the bound of distinct sites: by process, kind and API only)"

type entry struct {
	key
	count     int
	blocked   uint64 // not counted before on its thread
	raw       uint64
	maxBlock  uint64
	maxQueued int
}

// Collector aggregates synchronizations as the model hands them over, and
// what each thread did around them: its memory is bounded by the distinct
// (process, thread, kind, API, stream, stack) combinations and the
// threads, never by the number of calls or syncs. It keeps the entries in
// the order first seen, each process's apart: what is asked per process
// looks at that process's only.
type Collector struct {
	index   map[key]int
	entries []entry
	byPID   map[uint32][]int // the entries of each process

	threadState map[uint32]map[uint32]*thread // by pid and tid
	gpuState    map[uint32]*gpu
	lastKey     threadKey
	last        *thread
}

var _ model.Sink = (*Collector)(nil)

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	return &Collector{index: map[key]int{}, byPID: map[uint32][]int{}, threadState: map[uint32]map[uint32]*thread{}, gpuState: map[uint32]*gpu{}}
}

func (c *Collector) thread(pid, tid uint32) *thread {
	k := threadKey{pid, tid}
	if c.last != nil && c.lastKey == k {
		return c.last
	}
	threads := c.threadState[pid]
	if threads == nil {
		threads = map[uint32]*thread{}
		c.threadState[pid] = threads
	}
	t := threads[tid]
	if t == nil {
		t = &thread{}
		threads[tid] = t
	}
	c.lastKey, c.last = k, t
	return t
}

// Sync adds s to its entry, and its blocked time to its thread.
func (c *Collector) Sync(p *model.Process, s *model.Sync) {
	k := key{pid: p.PID, tid: s.TID, kind: s.Kind, api: s.API, symbol: s.Symbol, stream: int32(s.Stream), stack: s.Stack, pyStack: s.PyStack}
	i, ok := c.index[k]
	if !ok && len(c.entries) >= maxEntries {
		k = key{pid: p.PID, tid: model.OtherTID, kind: s.Kind, api: s.API, stream: -1, stack: -1, pyStack: -1, other: true}
		i, ok = c.index[k]
	}
	if !ok {
		i = len(c.entries)
		c.index[k] = i
		c.entries = append(c.entries, entry{key: k})
		c.byPID[p.PID] = append(c.byPID[p.PID], i)
	}
	e := &c.entries[i]
	e.count++
	e.blocked += c.thread(p.PID, s.TID).sync(s)
	e.raw += s.BlockedNs
	e.maxBlock = max(e.maxBlock, s.BlockedNs)
	e.maxQueued = max(e.maxQueued, s.QueuedOps)
}

// Call follows each thread: its calls, the work it enqueued, the gaps
// between its calls.
func (c *Collector) Call(p *model.Process, x *model.Call) { c.thread(p.PID, x.TID).call(x) }

// GPUOp follows the time some GPU work of the process was queued or
// running.
func (c *Collector) GPUOp(p *model.Process, op *model.GPUOp) {
	g := c.gpuState[p.PID]
	if g == nil {
		g = newGPU()
		c.gpuState[p.PID] = g
	}
	g.op(op)
}

func (*Collector) Dependency(*model.Process, *model.Dependency) {}

// Hold notes a stretch cudatap held a thread: its time is taken out of
// the thread's wall time (Thread.HeldNs).
func (c *Collector) Hold(p *model.Process, h *model.Hold) {
	c.thread(p.PID, h.TID).hold(h.Start, h.End)
}

// Totals counts synchronizations split by whether the program asked for
// them (Kind.Explicit).
type Totals struct {
	Explicit, Implicit     int
	ExplicitNs, ImplicitNs uint64
}

// StreamTotals sums the synchronizations of process pid per stream id; key
// -1 holds the device-wide ones. Blocked times count each nanosecond of a
// thread once.
func (c *Collector) StreamTotals(pid uint32) map[int]Totals {
	return c.streamTotals(pid, nil)
}

// WorkStreamTotals is StreamTotals of the threads that launch work only:
// background threads' waits (HostOf) held none of them up.
func (c *Collector) WorkStreamTotals(r *model.Result, pid uint32) map[int]Totals {
	roles := map[uint32]Role{}
	for _, t := range c.threads(r, pid) {
		roles[t.TID] = t.Role
	}
	return c.streamTotals(pid, func(tid uint32) bool { return !roles[tid].Background() })
}

func (c *Collector) streamTotals(pid uint32, keep func(tid uint32) bool) map[int]Totals {
	out := map[int]Totals{}
	for _, i := range c.byPID[pid] {
		e := &c.entries[i]
		if keep != nil && !keep(e.tid) {
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
// API, user line, background or not): those of the threads that launch
// work first, most blocked time first.
func ProcessSites(r *model.Result, c *Collector, pid uint32) []Site {
	p := r.Process(pid)
	if p == nil {
		return nil
	}
	out := processSites(r, c, p)
	sortSites(out)
	return out
}

func processSites(r *model.Result, c *Collector, p *model.Process) []Site {
	if c == nil {
		return nil
	}
	type siteKey struct {
		kind       model.SyncKind
		api, site  string
		background Role
	}
	threads := map[uint32]*Thread{}
	ts := c.threads(r, p.PID)
	for i := range ts {
		threads[ts[i].TID] = &ts[i]
	}
	idx := map[siteKey]int{}
	type siteThread struct {
		site int
		tid  uint32
	}
	named := map[siteThread]bool{} // the threads each site lists
	var out []Site
	for _, i := range c.byPID[p.PID] {
		e := &c.entries[i]
		py := describe.PyStack(r.Names, p, e.pyStack)
		native := describe.NativeStack(r.Names, p, e.stack, e.api, e.symbol, allFrames)
		site, via, user := UserSite(py, native)
		if e.other {
			site, via, user = otherSite, "", false
		}
		th := threads[e.tid]
		var bg Role
		label := fmt.Sprintf("tid %d", e.tid)
		if th != nil {
			label = th.Label()
			if th.Role.Background() {
				bg = th.Role
			}
		}
		k := siteKey{kind: e.kind, api: e.api.String(), site: site, background: bg}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			st := Site{PID: p.PID, Process: p.Label(), Kind: e.kind.String(), Explicit: e.kind.Explicit(),
				API: k.api, Site: site, UserFrame: user, Via: via, Background: bg,
				PythonStack: py, NativeStack: native, Hint: e.kind.Hint()}
			if len(py) > 0 {
				st.PythonLine = py[0]
			}
			out = append(out, st)
		}
		st := &out[j]
		st.Count += e.count
		st.BlockedNs += e.blocked
		st.OverlappedNs += e.raw - e.blocked
		st.MaxBlockedNs = max(st.MaxBlockedNs, e.maxBlock)
		st.QueuedOps = max(st.QueuedOps, e.maxQueued)
		if s := int(e.stream); !slices.Contains(st.Streams, s) {
			st.Streams = append(st.Streams, s)
		}
		if !named[siteThread{j, e.tid}] {
			named[siteThread{j, e.tid}] = true
			st.Threads = append(st.Threads, label)
		}
	}
	return out
}

func sortSites(out []Site) {
	slices.SortFunc(out, func(a, b Site) int {
		return cmp.Or(cmp.Compare(a.Background, b.Background), cmp.Compare(b.BlockedNs, a.BlockedNs), cmp.Compare(b.Count, a.Count),
			cmp.Compare(a.PID, b.PID), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Site, b.Site),
			cmp.Compare(strings.Join(a.NativeStack, ";"), strings.Join(b.NativeStack, ";")))
	})
}

// Where is the site's most telling place: the innermost line of the
// user's code, else the innermost frame; "" without a stack.
func (s *Site) Where() string { return s.Site }

// Hosts is the host side of every process with calls, by pid.
func Hosts(r *model.Result, c *Collector) []Host {
	var out []Host
	for _, p := range r.Processes {
		if h := HostOf(r, c, p.PID); h != nil {
			out = append(out, *h)
		}
	}
	return out
}

// WriteJSON writes the sites, the threads and the loss account as one
// JSON document.
func WriteJSON(w io.Writer, r *model.Result, sites []Site, hosts []Host) error {
	var threads []Thread
	for _, h := range hosts {
		threads = append(threads, h.Threads...)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Sites   []Site      `json:"sites"`
		Threads []Thread    `json:"threads"`
		Drops   model.Drops `json:"drops"`
		Lost    uint64      `json:"lost_events"`
	}{sites, threads, r.Drops, r.Drops.Lost()})
}

// TextOptions tune WriteText.
type TextOptions struct {
	Top        int  // sites in the table; 0: all
	FullStacks bool // every Python and native frame of each site
}

// WriteText writes the sites for a terminal: how much the threads that
// launch work were blocked and which threads were background ones, a
// ranked table, then each site's user line, where the call was made, and
// its fix hint (or its stacks, with FullStacks).
func WriteText(w io.Writer, r *model.Result, sites []Site, hosts []Host, opts TextOptions) error {
	var work, background uint64
	for _, s := range sites {
		if s.Background == "" {
			work += s.BlockedNs
		} else {
			background += s.BlockedNs
		}
	}
	fmt.Fprintf(w, "%d synchronization site(s), %s blocked in total on the threads that launch work", len(sites), dur(work))
	if background > 0 {
		fmt.Fprintf(w, "; %s more on background threads, which held none of them up", dur(background))
	}
	fmt.Fprintln(w)
	for _, h := range hosts {
		writeHost(w, r, &h)
	}
	fmt.Fprintln(w)
	if opts.Top > 0 && len(sites) > opts.Top {
		sites = sites[:opts.Top]
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tBLOCKED\tCOUNT\tKIND\tAPI\tPID\tTHREAD\tWHERE")
	for i, s := range sites {
		blocked := dur(s.BlockedNs)
		if s.Background != "" {
			blocked = "(" + blocked + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%d\t%s\t%s\n", i+1, blocked, s.Count, s.Kind, s.API, s.PID, threadCell(&s), whereCell(&s))
	}
	tw.Flush()
	for i, s := range sites {
		fmt.Fprintf(w, "\n#%d %s in %s, %d× on %s (%s blocked, max %s, up to %d GPU ops queued", i+1, s.Kind, s.API, s.Count,
			strings.Join(s.Threads, ", "), dur(s.BlockedNs), dur(s.MaxBlockedNs), s.QueuedOps)
		if s.OverlappedNs > 0 {
			fmt.Fprintf(w, "; %s more overlapped time already counted on its thread", dur(s.OverlappedNs))
		}
		fmt.Fprintln(w, ")")
		if s.Background != "" {
			fmt.Fprintf(w, "    %s: did not hold up the threads that launch work\n", s.Background)
		}
		switch {
		case s.Site == "":
			fmt.Fprintf(w, "    at  (no stack)\n")
		case s.UserFrame:
			fmt.Fprintf(w, "    at  %s\n", s.Site)
		default:
			fmt.Fprintf(w, "    at  %s (no frame of the user's code: a library's own thread)\n", s.Site)
		}
		if s.Via != "" && !opts.FullStacks {
			fmt.Fprintf(w, "    via %s\n", s.Via)
		}
		if opts.FullStacks {
			for _, f := range s.PythonStack {
				fmt.Fprintf(w, "    py  %s\n", f)
			}
			for _, f := range s.NativeStack {
				fmt.Fprintf(w, "    c   %s\n", f)
			}
		}
		if s.Background == "" {
			fmt.Fprintf(w, "    fix: %s\n", s.Hint)
		}
	}
	if !opts.FullStacks && len(sites) > 0 {
		fmt.Fprintf(w, "\n(--full-stacks shows every Python and native frame; --json keeps them too)\n")
	}
	fmt.Fprintf(w, "\n%s\n", describe.Account(r))
	return nil
}

// writeHost says how blocked the threads of one process that launch work
// were, and names its background threads.
func writeHost(w io.Writer, r *model.Result, h *Host) {
	label := fmt.Sprintf("pid %d", h.PID)
	for _, p := range r.Processes {
		if p.PID == h.PID {
			label = p.Label()
		}
	}
	if h.WorkThreads > 0 {
		var names []string
		for _, t := range h.Threads {
			if t.Role == RoleWork {
				names = append(names, t.Label())
			}
		}
		who, its := "the thread that launches work", "its"
		if h.WorkThreads > 1 {
			who, its = fmt.Sprintf("the %d threads that launch work", h.WorkThreads), "their"
		}
		fmt.Fprintf(w, "  %s: %s, %s, blocked %s of %s %s wall time (%.0f%%)\n", label,
			who, strings.Join(names, ", "), dur(h.BlockedNs), its, dur(h.ThreadWallNs), 100*h.Blocked())
	}
	for _, t := range h.Background() {
		what := fmt.Sprintf("%d sync(s), %s", t.Syncs, dur(t.BlockedNs))
		if t.Role == RolePoller {
			what = fmt.Sprintf("%d poll loop(s) over %s", t.Polls, dur(t.BlockedNs))
		}
		fmt.Fprintf(w, "  %s: %s (%s; %s), did not hold up the threads that launch work\n", t.Label(), t.Role, t.Why, what)
	}
}

func threadCell(s *Site) string {
	c := strings.Join(s.Threads, ",")
	if s.Background != "" {
		c += " [" + string(s.Background) + "]"
	}
	return c
}

func whereCell(s *Site) string {
	switch {
	case s.Site == "":
		return "(no stack)"
	case !s.UserFrame:
		return s.Site + " [no user frame]"
	}
	return s.Site
}

func dur(ns uint64) string { return units.Duration(ns) }
