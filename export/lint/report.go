package lint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cudatap/cudatap/export/internal/describe"
	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// Finding is one lint that fired in one process (and device, for
// many-busy-streams), with what it cost and whether that raises it.
type Finding struct {
	ID      ID     `json:"id"`
	Level   Level  `json:"level"`
	Cost    Cost   `json:"cost"`
	Title   string `json:"title"`
	PID     uint32 `json:"pid"`
	Process string `json:"process"`
	Device  *int   `json:"device,omitempty"` // many-busy-streams: the device (-1: unknown)
	// Count is what fired, in Unit: copies, uses, streams (the most busy
	// at once) or launches. Sites is how many distinct sites (or pairs of
	// sites) it came from; Examples shows the costliest, then the most
	// frequent.
	Count    int64     `json:"count"`
	Unit     string    `json:"unit"`
	Summary  string    `json:"summary"`
	Sites    int       `json:"sites"`
	Examples []Example `json:"examples"`
	Fix      string    `json:"fix"`
	// Scope says what the lint cannot see.
	Scope string `json:"scope,omitempty"`
}

// Example is one site (or pair of sites) of a finding: how often it
// fired there, what that cost (in the finding's kind of cost; at most
// when CostAtMost), and the calls of its first occurrence.
type Example struct {
	Count      int64  `json:"count"`
	CostNs     uint64 `json:"cost_ns"`
	CostAtMost bool   `json:"cost_at_most,omitempty"`
	Note       string `json:"note,omitempty"`
	// Proof (races): what the calls prove, strongest first: "copies"
	// (a copy or memset on both sides), "write then kernel" (a kernel
	// given memory a copy or memset wrote), "kernel then use" (a copy or
	// memset of memory a kernel was given: the kernel may only have read
	// it), "kernels" (both may only have read it).
	Proof string     `json:"proof,omitempty"`
	Calls []Evidence `json:"calls"`
}

// Evidence is one call: what it was, when (since the recording began),
// on which thread and stream, and where: the innermost user Python frame,
// else the innermost user native frame (syncs.UserSite).
type Evidence struct {
	Role        string `json:"role"`             // copy, write, may write (a kernel given the memory), use, op, launch, sync
	Call        string `json:"call"`             // the exact symbol
	Kernel      string `json:"kernel,omitempty"` // a launch's kernel
	Seq         int    `json:"seq"`              // the call's position in its process
	AtNs        uint64 `json:"at_ns"`
	TID         uint32 `json:"tid"`
	Thread      string `json:"thread,omitempty"`
	Stream      int    `json:"stream"`
	StreamLabel string `json:"stream_label,omitempty"`
	Site        string `json:"site"` // "" when the call has no stack (--stacks all captures launches' and memsets')
	UserFrame   bool   `json:"user_frame"`
	Via         string `json:"via,omitempty"`
	Bytes       uint64 `json:"bytes,omitempty"`
}

// Rule describes one lint: what fires it, how it is priced and the fix.
type Rule struct {
	ID    ID     `json:"id"`
	Title string `json:"title"`
	Rule  string `json:"rule"`
	Fix   string `json:"fix"`
	Scope string `json:"scope,omitempty"`
	Cost  string `json:"cost"`
}

// Rules describes the lints with opts' thresholds, in report order.
func Rules(opts Options) []Rule {
	return append([]Rule{{OutOfMemory, "out of memory: a device allocation failed",
		"a device allocation (cudaMalloc and its forms, cuMemAlloc and its forms, cuMemCreate) that returned out of memory (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY); the attempts of one request (the same thread asking the same size again before any of its allocations succeeds) count once",
		oom.Fix, oom.Scope, pricing(OutOfMemory, opts)}}, collectorRules(opts)...)
}

// collectorRules are the rules of the lints the Collector runs, in
// report order (indexed like ids).
func collectorRules(opts Options) []Rule {
	return []Rule{
		{LegacyNonBlocking, "non_blocking copy on the legacy default stream",
			"an asynchronous host↔device copy (cudaMemcpyAsync and the like) on the legacy default stream (stream 0 / cudaStreamLegacy) that its thread does not synchronize right after (a blocking copy such as .item() or .cpu() does)",
			"put the copy on a non-default stream (with torch.cuda.stream(torch.cuda.Stream()): ..., or a stream made with cudaStreamNonBlocking), or build with per-thread default streams (nvcc --default-stream per-thread): on the legacy default stream it waits for, and holds up, the work of every blocking stream",
			"",
			pricing(LegacyNonBlocking, opts)},
		{CrossStreamRace, "possible race: device memory written on one stream, used on another without a wait",
			"a copy, memset or kernel uses device memory that a copy or memset wrote, or a kernel was given (and may have written), on another stream, with no event wait, legacy-stream rule or host synchronization known to order them; a kernel uses the device pointers among its parameter values (record --kernel-args); ranked by what the calls prove: copies and memsets on both sides, then a kernel given memory a copy or memset wrote, then a copy or memset of memory a kernel was given, then two kernels",
			"order the use after the write: cudaEventRecord(e, writing stream) then cudaStreamWaitEvent(using stream, e) (PyTorch: using_stream.wait_stream(writing_stream), and tensor.record_stream(using_stream) when the memory is freed while still in use there)",
			raceScope(true),
			pricing(CrossStreamRace, opts)},
		{ManyBusyStreams, fmt.Sprintf("more than %d streams busy at once on one device", opts.MaxBusyStreams),
			fmt.Sprintf("more than %d streams of a process with GPU work at the same instant on one device", opts.MaxBusyStreams),
			fmt.Sprintf("use fewer streams (one for compute, one for copies, one for communication) or a small pool reused round-robin: past CUDA_DEVICE_MAX_CONNECTIONS (%d by default) streams share hardware queues and wait behind each other's work", opts.MaxBusyStreams),
			"from the ops' times as drawn: inferred between the synchronizations that bound them unless --gpu-times measured them; an op nothing bounded has no known duration and is not counted",
			pricing(ManyBusyStreams, opts)},
		{PageableLoop, "pageable copies in a loop",
			fmt.Sprintf("one call site copying pageable (not pinned) host memory to or from the device at least %d times", opts.PageableRepeats),
			"pin the host buffer once and reuse it (tensor.pin_memory(), DataLoader(pin_memory=True), cudaHostAlloc or cudaHostRegister): each pageable copy is staged through a driver buffer and blocks the host",
			"",
			pricing(PageableLoop, opts)},
		{SyncEveryLaunch, "a synchronize after every launch",
			fmt.Sprintf("a thread whose launches are each followed by a stream, device or event synchronize before its next launch, %d launches in a row or more", opts.SyncRun),
			"synchronize once per step, or only where the host needs a result; to order or time work, record events (cudaEventRecord, torch.cuda.Event) and wait on them",
			"",
			pricing(SyncEveryLaunch, opts)},
	}
}

// raceScope says what the race lint cannot see, in a recording with
// kernel parameter values or without.
func raceScope(kernels bool) string {
	const allocs = "only memory allocated while traced (cudaMalloc and the like) is followed"
	if !kernels {
		return "copies and memsets only: kernel arguments were not recorded (record --kernel-args), so what kernels read and write is not seen; " + allocs
	}
	return fmt.Sprintf("a kernel is taken to use each device pointer among its first %d parameters' values, up to %d bytes into each, at least the first %d of each and %d in all (a pointer deeper into a large struct passed by value is not seen), one byte at it (a race elsewhere in what it reads or writes is missed); whether it reads or writes is not known, so a race with a kernel is possible, not proven: two streams that only read the same memory show as one; %s",
		event.KernelParams, event.KernelValueMax, event.KernelValueFloor, event.KernelBytes, allocs)
}

// pricing says how a lint's findings are priced.
func pricing(id ID, opts Options) string {
	note := fmt.Sprintf("; below %s of its process's traced time a finding is a note, not raised", percent(opts.NoteBelow))
	switch id {
	case LegacyNonBlocking:
		return "serialized GPU time: per copy, the time it waited for work of blocking streams (when it did) and the time it ran while an op enqueued after it waited behind it (on the legacy stream or a blocking stream); " +
			"measured with --gpu-times, else at most the stretch from its enqueue (or the waiting op's) to the call that proved it complete" + note
	case OutOfMemory:
		return "not priced in time: a failed allocation, always an error"
	case CrossStreamRace:
		return "not priced in time: a possible wrong result, always an error"
	case ManyBusyStreams:
		return fmt.Sprintf("the time more than %d streams had GPU work at once: measured with --gpu-times, else at most the time more than %d streams may have had some (each op anywhere between its enqueue and the call that proved it complete)",
			opts.MaxBusyStreams, opts.MaxBusyStreams) + note
	case PageableLoop, SyncEveryLaunch:
		return "host time blocked in the calls that fired it, measured" + note
	}
	return ""
}

// namer names the calls of a result's processes.
type namer struct {
	r     *model.Result
	sites map[siteName]named
}

type siteName struct {
	pid uint32
	site
}

type named struct {
	site, via string
	user      bool
}

func (n *namer) site(p *model.Process, s site) named {
	k := siteName{p.PID, s}
	if v, ok := n.sites[k]; ok {
		return v
	}
	py := describe.PyStack(n.r.Names, p, s.py)
	native := describe.NativeStack(n.r.Names, p, s.stack, s.api, s.symbol, siteFrames)
	var v named
	v.site, v.via, v.user = syncs.UserSite(py, native)
	n.sites[k] = v
	return v
}

func (n *namer) evidence(p *model.Process, r ref, role string) Evidence {
	e := Evidence{Role: role, Call: (&model.Call{API: r.api, Symbol: r.symbol}).SymbolName(), Seq: r.seq, TID: r.tid,
		Stream: int(r.stream), Bytes: r.bytes}
	if r.kernel() {
		e.Kernel = describe.KernelOf(n.r.Names, p, r.fn).Display
	}
	if r.start > n.r.Start {
		e.AtNs = r.start - n.r.Start
	}
	if n.r.Names != nil {
		e.Thread = n.r.Names.Thread(p.PID, r.tid)
	}
	if r.stream >= 0 && int(r.stream) < len(p.Streams) && p.Streams[r.stream] != nil {
		e.StreamLabel = p.Streams[r.stream].Label()
	}
	s := n.site(p, r.site())
	e.Site, e.Via, e.UserFrame = s.site, s.via, s.user
	return e
}

// Findings ends the collection (what was still open counts) and names
// what fired, priced and ranked: errors, then warnings, then notes, each
// the costliest first (ties in lint order, then process by process). Call
// it once the model has finished.
func Findings(r *model.Result, c *Collector) []Finding {
	if r == nil {
		return nil
	}
	opts := DefaultOptions()
	if c != nil {
		opts = c.opts
	}
	out := oomFindings(r, opts)
	if c == nil {
		return out
	}
	c.flush()
	n := &namer{r: r, sites: map[siteName]named{}}
	rules := collectorRules(c.opts)
	for l := range nLints {
		for _, p := range r.Processes {
			ps := c.procs[p.PID]
			if ps == nil {
				continue
			}
			from := len(out)
			if l == lStreams {
				out = append(out, c.streamFindings(n, p, ps, rules[l])...)
			} else if f, ok := c.groupFinding(n, p, ps, l, rules[l]); ok {
				out = append(out, f)
			}
			for i := from; i < len(out); i++ {
				price(&out[i], runNs(r, p, &ps.holds), c.opts.NoteBelow)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Level.rank(), b.Level.rank()), cmp.Compare(b.Cost.Ns, a.Cost.Ns))
	})
	return out
}

// Limits is what the collector's bounds left out.
func (c *Collector) Limits() Limits { return c.limits }

var roles = [nLints][2]string{lLegacy: {"copy"}, lRace: {"write", "use"}, lPageable: {"copy"}, lSync: {"launch", "sync"}}

// merged is the groups of one lint whose calls have the same named sites.
type merged struct {
	group
	first   int    // seq of its first call
	boundNs uint64 // its groups' bounds, added up
	calls   []Evidence
}

// costNs is what the sites cost, measured plus bounded.
func (m *merged) cost() uint64 { return m.costNs + m.boundNs }

func (c *Collector) groupFinding(n *namer, p *model.Process, ps *proc, l int, rule Rule) (Finding, bool) {
	var list []*merged
	index := map[string]*merged{}
	for i := range ps.groups[l].list {
		g := &ps.groups[l].list[i]
		var calls []Evidence
		var key strings.Builder
		for k, role := range roles[l] {
			if role == "" {
				continue
			}
			if l == lRace && k == 0 && g.calls[0].kernel() {
				role = "may write"
			}
			e := n.evidence(p, g.calls[k], role)
			calls = append(calls, e)
			fmt.Fprintf(&key, "%s|%s|%s|", e.Call, e.Kernel, e.Site)
			if e.Site == "" {
				// No stack: the raw key's thread and stream tell sites apart.
				fmt.Fprintf(&key, "%d|%d|", g.key.tid, e.Stream)
			}
		}
		fmt.Fprintf(&key, "%d", g.key.kind)
		m := index[key.String()]
		if m == nil {
			m = &merged{group: group{key: g.key, calls: g.calls, addr: g.addr, allocStart: g.allocStart, allocSize: g.allocSize},
				first: g.calls[0].seq, calls: calls}
			index[key.String()] = m
			list = append(list, m)
		} else if g.calls[0].seq < m.first {
			m.first, m.calls, m.group.calls = g.calls[0].seq, calls, g.calls
			m.addr, m.allocStart, m.allocSize = g.addr, g.allocStart, g.allocSize
		}
		m.count += g.count
		m.bytes += g.bytes
		m.waited += g.waited
		m.pageable += g.pageable
		m.runs += g.runs
		m.longest = max(m.longest, g.longest)
		m.costNs += g.costNs
		m.boundNs += g.bound.total()
		m.atMost = m.atMost || g.atMost
	}
	if l == lPageable {
		list = slices.DeleteFunc(list, func(m *merged) bool { return m.count < int64(c.opts.PageableRepeats) })
	}
	if len(list) == 0 {
		return Finding{}, false
	}
	slices.SortStableFunc(list, func(a, b *merged) int {
		// Races: what the calls prove first (their cost is no time).
		return cmp.Or(cmp.Compare(proofOf(a.calls).rank, proofOf(b.calls).rank), cmp.Compare(b.cost(), a.cost()),
			cmp.Compare(b.count, a.count), cmp.Compare(a.first, b.first))
	})
	f := Finding{ID: rule.ID, Title: rule.Title, PID: p.PID, Process: p.Label(), Sites: len(list), Fix: rule.Fix, Scope: rule.Scope}
	var bytes uint64
	var waited, pageable, runs int64
	for _, m := range list {
		f.Count += m.count
		bytes += m.bytes
		waited += m.waited
		pageable += m.pageable
		runs += m.runs
		f.Cost.Ns += m.costNs
		f.Cost.AtMost = f.Cost.AtMost || m.atMost
	}
	for _, m := range list[:min(len(list), c.opts.Examples)] {
		f.Examples = append(f.Examples, Example{Count: m.count, CostNs: m.cost(), CostAtMost: m.atMost, Note: note(l, m),
			Proof: proofOf(m.calls).name, Calls: m.calls})
	}
	switch l {
	case lLegacy:
		// The bounds of all its copies as one union: never more than the run.
		f.Cost.Kind, f.Cost.Ns = CostSerialized, f.Cost.Ns+ps.legacy.bound.total()
	case lRace:
		f.Cost.Kind = CostCorrectness
		f.Scope = raceScope(ps.kernelArgs)
	case lPageable, lSync:
		f.Cost.Kind = CostBlocked
	}
	switch l {
	case lLegacy:
		f.Unit = "copies"
		f.Summary = fmt.Sprintf("%s (%s) on the legacy default stream not synchronized right after, from %s; %d from pageable memory, %d waited for work queued on blocking streams",
			plural(f.Count, "asynchronous host↔device copy", "asynchronous host↔device copies"), units.Bytes(bytes), plural(f.Sites, "site", "sites"), pageable, waited)
	case lRace:
		f.Unit = "uses"
		f.Summary = fmt.Sprintf("%s device memory another stream wrote, with no event wait or synchronization known between (%s, at %s)",
			plural(f.Count, "copy or memset used", "copies and memsets used"), units.Bytes(bytes), plural(f.Sites, "pair of sites", "pairs of sites"))
		if ps.kernelArgs {
			f.Summary = fmt.Sprintf("%s device memory another stream wrote or gave a kernel, with no event wait or synchronization known between (at %s; the strongest evidence: %s)",
				plural(f.Count, "copy, memset or kernel used", "copies, memsets and kernels used"), plural(f.Sites, "pair of sites", "pairs of sites"), proofOf(list[0].calls).words)
		}
	case lPageable:
		f.Unit = "copies"
		f.Summary = fmt.Sprintf("%s (%s) from %s, each at least %d times",
			plural(f.Count, "pageable copy", "pageable copies"), units.Bytes(bytes), plural(f.Sites, "call site", "call sites"), c.opts.PageableRepeats)
	case lSync:
		f.Unit = "launches"
		f.Summary = fmt.Sprintf("%s in %s of at least %d, each followed by a synchronize before the next launch",
			plural(f.Count, "launch", "launches"), plural(runs, "run", "runs"), c.opts.SyncRun)
	}
	return f, true
}

func note(l int, m *merged) string {
	switch l {
	case lLegacy:
		return fmt.Sprintf("%s %s", units.Bytes(m.bytes), m.key.kind)
	case lRace:
		where := fmt.Sprintf("at 0x%x, offset %s into a %s allocation at 0x%x", m.addr, units.Bytes(m.addr-m.allocStart), units.Bytes(m.allocSize), m.allocStart)
		if m.calls[0].Kernel != "" || m.calls[1].Kernel != "" {
			return "first " + where + ", a pointer a kernel was given" // the extent a kernel uses is not known
		}
		return fmt.Sprintf("%s in all; first %s", units.Bytes(m.bytes), where)
	case lPageable:
		return fmt.Sprintf("%s %s in all", units.Bytes(m.bytes), m.key.kind)
	case lSync:
		return fmt.Sprintf("%s, the longest %d launches", plural(m.runs, "run", "runs"), m.longest)
	}
	return ""
}

// proof is what a race's calls prove: its rank (0 strongest), its name
// (Example.Proof) and its words.
type proof struct {
	rank        int
	name, words string
}

func proofOf(calls []Evidence) proof {
	if len(calls) < 2 {
		return proof{}
	}
	switch w, u := calls[0].Kernel != "", calls[1].Kernel != ""; {
	case !w && !u:
		return proof{0, "copies", "copies or memsets on both sides"}
	case !w:
		return proof{1, "write then kernel", "a kernel given memory a copy or memset wrote"}
	case !u:
		return proof{2, "kernel then use", "a copy or memset of memory a kernel was given, which it may only have read"}
	}
	return proof{3, "kernels", "two kernels given the same memory, which both may only have read"}
}

func (c *Collector) streamFindings(n *namer, p *model.Process, ps *proc, rule Rule) []Finding {
	var out []Finding
	for _, ds := range ps.ops.devices {
		s, d := ds.drawn, ds.device
		if s.peak <= c.opts.MaxBusyStreams {
			continue
		}
		dev := int(d)
		f := Finding{ID: rule.ID, Title: rule.Title, PID: p.PID, Process: p.Label(), Device: &dev, Count: int64(s.peak), Unit: "streams",
			Sites: len(s.shown), Fix: rule.Fix, Scope: rule.Scope, Cost: Cost{Kind: CostOversubscribed}}
		f.Cost.Ns, f.Cost.AtMost = ds.over()
		where := "device " + strconv.Itoa(dev)
		if d == model.DeviceUnknown {
			where = "an unknown device"
		}
		at := uint64(0)
		if s.peakAt > n.r.Start {
			at = s.peakAt - n.r.Start
		}
		f.Summary = fmt.Sprintf("up to %d streams had GPU work at once on %s (at +%s); more than %d for %s in all",
			s.peak, where, units.Offset(at), c.opts.MaxBusyStreams, dur(s.overNs))
		for _, x := range s.shown {
			e := n.evidence(p, x.call, "op")
			e.Stream = int(x.stream)
			f.Examples = append(f.Examples, Example{Count: 1, Note: fmt.Sprintf("on the GPU %s–%s", at2(n, x.start), at2(n, x.end)), Calls: []Evidence{e}})
		}
		out = append(out, f)
	}
	return out
}

func at2(n *namer, t uint64) string {
	if t > n.r.Start {
		return "+" + units.Offset(t-n.r.Start)
	}
	return "+" + units.Offset(0)
}

func plural[N int | int64](n N, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.FormatInt(int64(n), 10) + " " + many
}

func dur(ns uint64) string { return units.Duration(ns) }

// TextOptions tune WriteText.
type TextOptions struct {
	// Examples shown per finding (0: all it has).
	Examples int
	// Section writes the short section of the record and export summary:
	// nothing when no lint fired and nothing was left out, no rules, no
	// loss account.
	Section bool
	// Input names the recording in the hint to `cudatap lint`.
	Input string
}

// WriteText writes the findings for a terminal: those raised in full,
// then the notes (in the summary's section, a line each).
func WriteText(w io.Writer, r *model.Result, c *Collector, fs []Finding, opts TextOptions) error {
	var b strings.Builder
	limits, lopts := Limits{}, DefaultOptions()
	if c != nil {
		limits, lopts = c.limits, c.opts
	}
	switch {
	case opts.Section && len(fs) == 0 && !limits.any():
		return nil
	case opts.Section && len(fs) == 0:
		b.WriteString("\nlints: none fired\n") // what was left out still shows, below
	case opts.Section:
		in := "cudatap lint IN.cudatap (of a recording: -o run.cudatap)"
		if opts.Input != "" {
			in = "cudatap lint " + opts.Input
		}
		fmt.Fprintf(&b, "\nlints: %s fired: %s (%s shows every example and the rules)\n", plural(len(fs), "finding", "findings"), LevelCounts(fs), in)
	case len(fs) == 0:
		fmt.Fprintf(&b, "cudatap lint: no lint fired (%s)\n", idList())
	default:
		fmt.Fprintf(&b, "cudatap lint: %s: %s (%s)\n", plural(len(fs), "finding", "findings"), LevelCounts(fs), idList())
	}
	notes := 0
	for _, f := range fs {
		if f.Level == LevelNote {
			notes++
			continue
		}
		b.WriteString("\n")
		writeFinding(&b, &f, opts)
	}
	if notes > 0 {
		fmt.Fprintf(&b, "\nnotes: each cost less than %s of its process's traced time (listed, not raised)\n", percent(lopts.NoteBelow))
	}
	for _, f := range fs {
		switch {
		case f.Level != LevelNote:
		case opts.Section:
			fmt.Fprintf(&b, "  [%s] %s: %s; cost: %s\n", f.ID, f.Process, f.Summary, f.Cost)
		default:
			b.WriteString("\n")
			writeFinding(&b, &f, opts)
		}
	}
	if limits.any() {
		fmt.Fprintf(&b, "\nlint limits (counted, not shown): %s\n", limitsLine(limits))
	}
	if !opts.Section {
		fmt.Fprintf(&b, "\n%s\n", describe.Account(r))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// LevelCounts says how many findings fs has at each level: "1 error, 2
// notes".
func LevelCounts(fs []Finding) string {
	var s []string
	for _, l := range Levels {
		n := 0
		for _, f := range fs {
			if f.Level == l {
				n++
			}
		}
		if n > 0 {
			s = append(s, plural(n, string(l), string(l)+"s"))
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func idList() string {
	s := []string{string(OutOfMemory)}
	for _, id := range ids {
		s = append(s, string(id))
	}
	return "checked: " + strings.Join(s, ", ")
}

func writeFinding(b *strings.Builder, f *Finding, opts TextOptions) {
	indent := "  "
	fmt.Fprintf(b, "%s%s: [%s] %s\n", indent, f.Level, f.ID, f.Title)
	fmt.Fprintf(b, "%s  %s: %s\n", indent, f.Process, f.Summary)
	fmt.Fprintf(b, "%s  cost: %s\n", indent, f.Cost)
	ex := f.Examples
	if opts.Examples > 0 && len(ex) > opts.Examples {
		ex = ex[:opts.Examples]
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for i, e := range ex {
		if f.ID != ManyBusyStreams || i == 0 {
			head := fmt.Sprintf("%s  ×%d", indent, e.Count)
			if f.ID == ManyBusyStreams {
				head = fmt.Sprintf("%s  the busy streams at the peak, by the call that enqueued their latest op:", indent)
			} else if e.Note != "" {
				head += ": " + e.Note
			}
			if e.Proof != "" {
				head += " [" + proofOf(e.Calls).words + "]"
			}
			if e.CostNs > 0 {
				at := ""
				if e.CostAtMost {
					at = "at most "
				}
				head += fmt.Sprintf(" (cost %s%s)", at, units.Duration(e.CostNs))
			}
			tw.Flush()
			fmt.Fprintln(b, head)
		}
		for _, ev := range e.Calls {
			where := ev.Site
			switch {
			case where == "":
				where = "(no stack: record with --stacks all)"
			case !ev.UserFrame:
				where += " [no user frame]"
			}
			extra := ""
			if f.ID == ManyBusyStreams {
				extra = "\t" + e.Note
			}
			call := ev.Call
			if ev.Kernel != "" {
				call += " " + ev.Kernel
			}
			fmt.Fprintf(tw, "%s    %s\t%s\t+%s\t%s\t%s\tat %s%s\n", indent, ev.Role, call, units.Offset(ev.AtNs), threadLabel(ev), streamLabel(ev), where, extra)
		}
	}
	tw.Flush()
	if n := len(f.Examples) - len(ex); n > 0 {
		fmt.Fprintf(b, "%s  (%d more in cudatap lint)\n", indent, n)
	}
	fmt.Fprintf(b, "%s  fix: %s\n", indent, f.Fix)
	if f.Scope != "" && !opts.Section {
		fmt.Fprintf(b, "%s  sees: %s\n", indent, f.Scope)
	}
}

func threadLabel(e Evidence) string {
	if e.Thread != "" {
		return fmt.Sprintf("%s (tid %d)", e.Thread, e.TID)
	}
	return fmt.Sprintf("tid %d", e.TID)
}

func streamLabel(e Evidence) string {
	switch {
	case e.StreamLabel != "":
		return e.StreamLabel
	case e.Stream < 0:
		return "no stream"
	}
	return "stream " + strconv.Itoa(e.Stream)
}

// String says what the bounds left out, in words.
func (l Limits) String() string { return limitsLine(l) }

func limitsLine(l Limits) string {
	var s []string
	add := func(n int64, what string) {
		if n != 0 {
			s = append(s, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(l.Threads, "calls of threads past the lints' limit")
	add(l.Sites, "occurrences at sites past the limit of distinct sites")
	add(l.Streams, "ops on streams past the limit (not checked for races)")
	add(l.Events, "event positions forgotten (later waits on them unknown)")
	add(l.Allocs, "device allocations not followed")
	add(l.Writes, "device writes forgotten (races with them not seen)")
	add(l.LateOps, "GPU ops laid out after the stream count passed their start (clipped)")
	add(l.Unpriced, "legacy-stream copies not priced (past the limit priced at once: their cost is left out)")
	return strings.Join(s, "; ")
}

// Schema is the version of WriteJSON's document (docs/lints.md): fields
// are only ever added; a removed or retyped field bumps it.
const Schema = 1

// WriteJSON writes the findings, the rules, the threshold of notes, the
// limits and the loss account as one JSON document.
func WriteJSON(w io.Writer, r *model.Result, c *Collector, fs []Finding) error {
	opts, limits := DefaultOptions(), Limits{}
	if c != nil {
		opts, limits = c.opts, c.limits
	}
	if fs == nil {
		fs = []Finding{}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		Schema    int         `json:"schema"`
		Findings  []Finding   `json:"findings"`
		Rules     []Rule      `json:"rules"`
		NoteBelow float64     `json:"note_below"`
		Limits    Limits      `json:"limits"`
		Drops     model.Drops `json:"drops"`
		Lost      uint64      `json:"lost_events"`
	}{Schema, fs, Rules(opts), opts.NoteBelow, limits, r.Drops, r.Drops.Lost()})
}
