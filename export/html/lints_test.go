package html

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/syncs/synctest"
	"github.com/cudatap/cudatap/tracer/event"
)

// lintsReport is the report of a loop that fires four lints: a possible
// race, a sync after every launch, pageable copies (both costly in its
// short run) and non_blocking copies on the legacy stream that cost
// nothing.
func lintsReport() *Report {
	const (
		tid      = 4123
		sA, sB   = 0x55aa00, 0x55bb00
		dev      = 0x7f5500000000
		hostBuf  = 0x5555000000
		load     = 0x555500002000
		step     = 0x555500003000
		frameCpy = 0x7f0000001000
	)
	r := synctest.New(tid, "train")
	r.Thread(tid, "train")
	r.Frame(frameCpy, "cudaMemcpyAsync (libcudart.so.13)")
	r.Frame(load, "load_batch (train)")
	r.Frame(step, "train_step (train)")
	at := synctest.Base
	tick := func() uint64 { at += 10 * synctest.US; return at }
	r.Call(event.CudaMalloc, tid, tick(), 10*synctest.US, 0x7ffd1000, 16<<20).Out = dev
	r.StreamCreate(tid, tick(), sA)
	r.StreamCreate(tid, tick(), sB)
	for range 10 {
		synctest.Stack(r.Call(event.CudaMemcpyAsync, tid, tick(), 5*synctest.US, dev, hostBuf, 4096, uint64(event.HostToDevice), 0), frameCpy, load)
		r.Call(event.CudaMemsetAsync, tid, tick(), 0, dev, 0, 4096, sA)
		r.Launch(tid, tick(), sB, gemm)
		synctest.Stack(r.StreamSync(tid, tick(), 100*synctest.US, sB), frameCpy, step)
	}
	c := NewCollector(Options{Version: "test"})
	return c.Build(r.Run(c))
}

// TestLintsSection: the page has the lints of `cudatap lint`, ranked,
// each with its cost, evidence and fix; notes apart, folded; a verdict
// points at them.
func TestLintsSection(t *testing.T) {
	rep := lintsReport()

	var levels []string
	for _, f := range rep.Lints {
		levels = append(levels, string(f.Level)+" "+string(f.ID))
	}
	want := []string{"error cross-stream-race", "warning sync-every-launch", "warning pageable-copy-loop", "note legacy-nonblocking-copy"}
	if !slices.Equal(levels, want) {
		t.Fatalf("lints %v, want %v", levels, want)
	}
	if len(rep.RaisedLints()) != 3 || len(rep.LintNotes()) != 1 || rep.NoteBelow != lint.DefaultOptions().NoteBelow {
		t.Errorf("raised %d, notes %d, below %v", len(rep.RaisedLints()), len(rep.LintNotes()), rep.NoteBelow)
	}
	verdict := false
	for _, f := range rep.Findings {
		if f.Title == "lints raised: 1 error, 2 warnings (see Lints)" && f.Severity == SevHigh && strings.Contains(f.Detail, "[cross-stream-race]") {
			verdict = true
		}
	}
	if !verdict {
		t.Errorf("no verdict points at the lints: %+v", rep.Findings)
	}

	var buf bytes.Buffer
	if err := rep.WriteHTML(&buf, ""); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	m := regexp.MustCompile(`(?s)<section id="lints">(.*?)</section>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no lints section")
	}
	sec := m[1]
	raised, notes, _ := strings.Cut(sec, `<details class="lint-notes">`)
	var got []string
	for _, x := range regexp.MustCompile(`data-lint="([a-z-]+)" data-level="([a-z]+)"`).FindAllStringSubmatch(raised, -1) {
		got = append(got, x[2]+" "+x[1])
	}
	if !slices.Equal(got, want[:3]) || !strings.Contains(notes, `data-lint="legacy-nonblocking-copy" data-level="note"`) ||
		!strings.Contains(notes, "1 note: each cost less than 1% of its process's traced time") {
		t.Errorf("raised %v, notes:\n%s", got, notes)
	}
	for _, s := range []string{"cost: not priced in time", "cost: 1.0 ms blocked on the host", "<code>load_batch (train)</code>", "<code>train_step (train)</code>",
		"fix: order the use after the write", "sees: copies and memsets only", "no stack: record with --stacks all", `<a href="#lints">Lints</a>`} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
}
