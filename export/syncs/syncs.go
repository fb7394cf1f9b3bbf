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

// Sites groups every synchronization of r by site, most blocked time first.
func Sites(r *model.Result) []Site {
	var out []Site
	for _, p := range r.Processes {
		out = append(out, ProcessSites(p)...)
	}
	sortSites(out)
	return out
}

// ProcessSites groups the synchronizations of one process by site (kind,
// API, innermost Python line, innermost native caller), most blocked time
// first.
func ProcessSites(p *model.Process) []Site {
	type key struct {
		kind    model.SyncKind
		api, py string
		native  string
	}
	idx := map[key]int{}
	var out []Site
	for i := range p.Syncs {
		s := &p.Syncs[i]
		k := key{kind: s.Kind, api: "?"}
		var py, native []string
		if s.Call >= 0 && s.Call < len(p.Calls) {
			c := &p.Calls[s.Call]
			k.api = c.API.String()
			py = describe.PyStack(p, c)
			native = describe.NativeStack(p, c, nativeFrames)
			if len(py) > 0 {
				k.py = py[0]
			}
			if len(native) > 0 {
				k.native = native[0]
			}
		}
		j, ok := idx[k]
		if !ok {
			j = len(out)
			idx[k] = j
			out = append(out, Site{PID: p.PID, Process: p.Label(), Kind: s.Kind.String(), Explicit: s.Kind.Explicit(),
				API: k.api, PythonLine: k.py, PythonStack: py, NativeStack: native, Hint: s.Kind.Hint()})
		}
		st := &out[j]
		st.Count++
		st.BlockedNs += s.BlockedNs
		st.MaxBlockedNs = max(st.MaxBlockedNs, s.BlockedNs)
		st.QueuedOps = max(st.QueuedOps, s.QueuedOps)
		if !slices.Contains(st.Streams, s.Stream) {
			st.Streams = append(st.Streams, s.Stream)
		}
	}
	sortSites(out)
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
	fmt.Fprintf(w, "\n%s\n", describe.Drops(r.Drops))
	return nil
}

func dur(ns uint64) string {
	return time.Duration(ns).Round(time.Microsecond).String()
}
