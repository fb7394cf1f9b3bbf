package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/syncs/synctest"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
)

// lastCall releases a workload held by --wait-before-exit once the model
// has handed over its n-th cudaDeviceSynchronize, its last call: every
// call before it was named while the workload lived.
type lastCall struct {
	model.Discard
	n, seen int
	exit    io.WriteCloser
	once    sync.Once
}

func (l *lastCall) Call(_ *model.Process, c *model.Call) {
	if c.API != event.CudaDeviceSynchronize {
		return
	}
	if l.seen++; l.seen == l.n {
		l.once.Do(func() {
			go func() { fmt.Fprintln(l.exit, "exit"); l.exit.Close() }()
		})
	}
}

// recordScenario records a simulated workload's scenario to a .cudatap file
// with the stacks record takes by default (configure, if given, changes
// the session's config), and returns it with the workload's report. syncs
// is the number of cudaDeviceSynchronize calls the scenario makes, its
// last call last.
func recordScenario(t *testing.T, b *sim.Build, scenario string, iters, syncs int, configure ...func(*tracer.Config)) (string, *sim.Report) {
	t.Helper()
	rec := filepath.Join(t.TempDir(), scenario+".cudatap")
	f, err := os.Create(rec)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	var stdout bytes.Buffer
	last := &lastCall{n: syncs, exit: pw}
	cfg := tracer.Config{
		Command: []string{b.Workload, "--scenario", scenario, "--iters", strconv.Itoa(iters), "--wait-before-exit"},
		Stacks:  probe.StacksSync, NVMLInterval: -1, Duration: time.Minute,
		Stdin: pr, Stdout: &stdout, Stderr: os.Stderr,
		Recording: f, Sink: last,
	}
	for _, c := range configure {
		c(&cfg)
	}
	out, err := tracer.Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%s: %v", scenario, err)
	}
	if out.Exit.Stopped {
		t.Fatalf("%s: the workload was stopped at the time limit: the session saw %d of %d cudaDeviceSynchronize", scenario, last.seen, syncs)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := sim.ParseReport(stdout.Bytes())
	if err != nil {
		t.Fatalf("%s: %v\n%s", scenario, err, stdout.String())
	}
	if got := rep.Calls["cudaDeviceSynchronize"]; got != syncs {
		t.Fatalf("%s made %d cudaDeviceSynchronize, the test expects %d", scenario, got, syncs)
	}
	if d := out.Result.Drops; d.Lost() != 0 {
		t.Fatalf("%s: %d events lost", scenario, d.Lost())
	}
	return rec, rep
}

type lintDoc struct {
	Schema   int            `json:"schema"`
	Findings []lint.Finding `json:"findings"`
	Rules    []lint.Rule    `json:"rules"`
	Limits   lint.Limits    `json:"limits"`
}

// lintJSON runs `cudatap lint --json` on a recording.
func lintJSON(t *testing.T, rec string) lintDoc {
	t.Helper()
	stdout, stderr, err := run(t, "lint", "--json", rec)
	if err != nil {
		t.Fatalf("lint --json %s: %v\n%s", rec, err, stderr)
	}
	var doc lintDoc
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatalf("lint --json: %v\n%s", err, stdout)
	}
	if doc.Schema != lint.Schema || len(doc.Rules) != 6 || doc.Limits != (lint.Limits{}) {
		t.Errorf("lint --json: schema %d, %d rules, limits %+v", doc.Schema, len(doc.Rules), doc.Limits)
	}
	return doc
}

// ids lists the findings' lints.
func lintIDs(fs []lint.Finding) []lint.ID {
	var out []lint.ID
	for _, f := range fs {
		out = append(out, f.ID)
	}
	return out
}

// checkCall checks one call of a finding's evidence.
func checkCall(t *testing.T, what string, e lint.Evidence, role, site string, stream int, calls ...string) {
	t.Helper()
	if e.Role != role || e.Site != site || (site != "" && !e.UserFrame) || e.Stream != stream || !slices.Contains(calls, e.Call) ||
		e.Thread != "workload" || e.AtNs == 0 || e.StreamLabel == "" {
		t.Errorf("%s: %+v; want role %s, site %q, stream %d, call %v, thread workload", what, e, role, site, stream, calls)
	}
}

// TestLintScenarios records each lint's simulated scenario and checks that
// the lint fires, alone, with the calls of the scenario as its evidence;
// that a clean pipeline fires none; and what the basic scenario fires.
func TestLintScenarios(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	const n = 12 // iterations: past the loop thresholds (10)

	t.Run("legacy-nonblocking", func(t *testing.T) {
		rec, rep := recordScenario(t, b, "lint-legacy-nonblocking", n, 1)
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.LegacyNonBlocking}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		f := doc.Findings[0]
		// n uploads and one on cudaStreamLegacy; the n read-backs, each
		// synchronized at once, are not non_blocking copies.
		if rep.Calls["cudaMemcpyAsync"] != 2*n+1 || f.Count != n+1 || f.Sites != 2 || len(f.Examples) != 2 ||
			f.Examples[0].Count != n || f.Examples[1].Count != 1 || f.PID != uint32(rep.PID) {
			t.Fatalf("finding %+v (%d cudaMemcpyAsync made)", f, rep.Calls["cudaMemcpyAsync"])
		}
		checkCall(t, "upload", f.Examples[0].Calls[0], "copy", "lint_upload (workload)", 0, "cudaMemcpyAsync")
		checkCall(t, "legacy upload", f.Examples[1].Calls[0], "copy", "lint_upload_legacy (workload)", 0, "cudaMemcpyAsync")
		if e := f.Examples[0].Calls[0]; e.Bytes != 64<<10 || e.StreamLabel != "stream 0 (legacy default)" {
			t.Errorf("upload %+v", e)
		}
	})

	t.Run("cross-stream", func(t *testing.T) {
		rec, _ := recordScenario(t, b, "lint-cross-stream", n, 2*n+1)
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.CrossStreamRace}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		f := doc.Findings[0]
		// One race per iteration: the unordered consume; the one after the
		// event wait, and the memset of memory nobody wrote, are not.
		if f.Count != n || f.Sites != 1 || f.Unit != "uses" || len(f.Examples) != 1 || !strings.Contains(f.Title, "possible race") ||
			!strings.Contains(f.Scope, "copies and memsets only") {
			t.Fatalf("finding %+v", f)
		}
		w, u := f.Examples[0].Calls[0], f.Examples[0].Calls[1]
		checkCall(t, "write", w, "write", "lint_produce (workload)", 1, "cudaMemcpyAsync")
		checkCall(t, "use", u, "use", "lint_consume (workload)", 2, "cudaMemcpyAsync")
		if u.Seq != w.Seq+1 || u.AtNs <= w.AtNs || !strings.Contains(f.Examples[0].Note, "offset 0 B into a 4.0 MiB allocation") {
			t.Errorf("write %+v, use %+v, note %q", w, u, f.Examples[0].Note)
		}
		// The text names both calls and their lines.
		stdout, _, err := run(t, "lint", rec)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"[cross-stream-race] possible race", "at lint_produce (workload)", "at lint_consume (workload)",
			"fix: order the use after the write: cudaEventRecord", "dropped events: 0"} {
			if !strings.Contains(stdout, s) {
				t.Errorf("lint text lacks %q:\n%s", s, stdout)
			}
		}
	})

	// Kernels given device memory through their parameters (record
	// --kernel-args, and --stacks all for the launches' lines): a kernel
	// reading what a kernel on another stream was given (y = x @ x, then
	// relu(y)), the same after an event wait (no race), a kernel given
	// what a copy on another stream wrote, a read-back of what a kernel on
	// another stream was given; ranked copy first. Without the parameter
	// values none of them is seen.
	t.Run("kernel-race", func(t *testing.T) {
		const syncs = 4*n + 1
		rec, rep := recordScenario(t, b, "lint-kernel-race", n, syncs, func(c *tracer.Config) {
			c.KernelArgs, c.Stacks = true, probe.StacksAll
		})
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.CrossStreamRace}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		f := doc.Findings[0]
		if rep.Calls["cudaLaunchKernel"] != 6*n || f.Count != 3*n || f.Sites != 3 || len(f.Examples) != 3 || f.Level != lint.LevelError ||
			!strings.Contains(f.Scope, "a kernel is taken to use each device pointer") {
			t.Fatalf("finding %+v (%d launches made)", f, rep.Calls["cudaLaunchKernel"])
		}
		launch := []string{"cuLaunchKernel", "cudaLaunchKernel"}
		for i, want := range []struct {
			proof                string
			writeRole, writeSite string
			writeCalls           []string
			useSite              string
			useCalls             []string
		}{
			{"write then kernel", "write", "lint_produce (workload)", []string{"cudaMemcpyAsync"}, "race_consume_input (workload)", launch},
			{"kernel then use", "may write", "race_produce (workload)", launch, "race_read_back (workload)", []string{"cudaMemcpyAsync"}},
			{"kernels", "may write", "race_produce (workload)", launch, "race_consume (workload)", launch},
		} {
			ex := f.Examples[i]
			if ex.Proof != want.proof || ex.Count != n {
				t.Errorf("example %d: %+v, want %q ×%d", i, ex, want.proof, n)
				continue
			}
			w, u := ex.Calls[0], ex.Calls[1]
			checkCall(t, want.proof+" write", w, want.writeRole, want.writeSite, 1, want.writeCalls...)
			checkCall(t, want.proof+" use", u, "use", want.useSite, 2, want.useCalls...)
			for _, c := range ex.Calls {
				if slices.Contains(launch, c.Call) != (c.Kernel != "") || c.Kernel != "" && !strings.HasPrefix(c.Kernel, "sim_") {
					t.Errorf("%s: %s names kernel %q", want.proof, c.Call, c.Kernel)
				}
			}
		}
		// Launch records without a stack carry the values too (right after
		// the header): the same races, their launches' sites unnamed.
		rec, _ = recordScenario(t, b, "lint-kernel-race", 1, 5, func(c *tracer.Config) { c.KernelArgs = true })
		if doc := lintJSON(t, rec); len(doc.Findings) != 1 || doc.Findings[0].Count != 3 || doc.Findings[0].Sites != 3 {
			t.Errorf("--kernel-args without stacks on launches: findings %+v", doc.Findings)
		}
		// Without the kernels' parameter values, no race is seen.
		rec, _ = recordScenario(t, b, "lint-kernel-race", 1, 5)
		if doc := lintJSON(t, rec); len(doc.Findings) != 0 {
			t.Errorf("without --kernel-args: findings %+v", doc.Findings)
		}
	})

	t.Run("many-streams", func(t *testing.T) {
		rec, _ := recordScenario(t, b, "lint-many-streams", n, 2*n+1)
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.ManyBusyStreams}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		f := doc.Findings[0]
		if f.Count != 10 || f.Device == nil || *f.Device != 0 || len(f.Examples) != 10 || f.Unit != "streams" {
			t.Fatalf("finding %+v", f)
		}
		for i, e := range f.Examples {
			// Launches carry no stack by default.
			checkCall(t, "busy stream", e.Calls[0], "op", "", i+1, "cuLaunchKernel", "cudaLaunchKernel")
		}
	})

	t.Run("pageable-loop", func(t *testing.T) {
		rec, _ := recordScenario(t, b, "lint-pageable-loop", n, 1)
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.PageableLoop}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		f := doc.Findings[0]
		// The loop's site; not the pinned copies, nor the single pageable
		// copy elsewhere.
		if f.Count != n || f.Sites != 1 || len(f.Examples) != 1 {
			t.Fatalf("finding %+v", f)
		}
		checkCall(t, "pageable copy", f.Examples[0].Calls[0], "copy", "lint_load_pageable (workload)", 1, "cudaMemcpyAsync")
	})

	t.Run("sync-every-launch", func(t *testing.T) {
		rec, _ := recordScenario(t, b, "lint-sync-every-launch", n, n+1)
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.SyncEveryLaunch}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		f := doc.Findings[0]
		if f.Count != n || len(f.Examples) != 1 || f.Examples[0].Note != fmt.Sprintf("1 run, the longest %d launches", n) {
			t.Fatalf("finding %+v", f)
		}
		l, s := f.Examples[0].Calls[0], f.Examples[0].Calls[1]
		checkCall(t, "launch", l, "launch", "", 1, "cuLaunchKernel", "cudaLaunchKernel")
		checkCall(t, "sync", s, "sync", "lint_step_sync (workload)", 1, "cudaStreamSynchronize")
		if s.Seq <= l.Seq {
			t.Errorf("sync %d before its launch %d", s.Seq, l.Seq)
		}
	})

	// No false positives: a pipeline done as the lints ask fires none, and
	// the summary has no lint section.
	t.Run("clean", func(t *testing.T) {
		rec, _ := recordScenario(t, b, "lint-clean", 2*n, 1)
		if doc := lintJSON(t, rec); len(doc.Findings) != 0 {
			t.Fatalf("findings %+v", doc.Findings)
		}
		stdout, _, err := run(t, "lint", rec)
		if err != nil || !strings.HasPrefix(stdout, "cudatap lint: no lint fired") {
			t.Errorf("lint: %v\n%s", err, stdout)
		}
		summary, stderr, err := run(t, "export", rec)
		if err != nil || strings.Contains(summary, "lints:") || !strings.Contains(summary, "cudatap summary") {
			t.Errorf("export summary (%v, %s):\n%s", err, stderr, summary)
		}
	})

	// basic is not clean: per iteration the D2H copy on stream 2 reads what
	// the H2D copy on stream 1 just wrote, no event between (the event edge
	// comes after it), and the H2D copy of every iteration but the first and
	// the one after the device-wide sync of cudaFree (iteration 10)
	// overwrites what the memset on stream 2 wrote: 2n-2 possible races.
	// Its D2H copy is pageable, from one line, every iteration.
	t.Run("basic", func(t *testing.T) {
		rec, _ := recordScenario(t, b, "basic", n, 1)
		doc := lintJSON(t, rec)
		if !slices.Equal(lintIDs(doc.Findings), []lint.ID{lint.CrossStreamRace, lint.PageableLoop}) {
			t.Fatalf("findings %v", lintIDs(doc.Findings))
		}
		race, pageable := doc.Findings[0], doc.Findings[1]
		if race.Count != 2*n-2 || race.Sites != 2 || race.Examples[0].Count != n || race.Examples[1].Count != n-2 {
			t.Fatalf("race %+v", race)
		}
		checkCall(t, "basic write", race.Examples[0].Calls[0], "write", "scenario_basic (workload)", 1, "cudaMemcpyAsync")
		checkCall(t, "basic use", race.Examples[0].Calls[1], "use", "scenario_basic (workload)", 2, "cudaMemcpyAsync")
		checkCall(t, "basic memset", race.Examples[1].Calls[0], "write", "", 2, "cudaMemsetAsync")
		if pageable.Count != n || pageable.Sites != 1 {
			t.Fatalf("pageable %+v", pageable)
		}
		checkCall(t, "basic pageable", pageable.Examples[0].Calls[0], "copy", "scenario_basic (workload)", 2, "cudaMemcpyAsync")
		// The export summary's section: one example each, and where to see all.
		summary, _, err := run(t, "export", rec)
		if err != nil {
			t.Fatal(err)
		}
		_, section, ok := strings.Cut(summary, "\nlints: 2 findings fired: "+lint.LevelCounts(doc.Findings)+" (cudatap lint "+rec+" shows every example and the rules)\n")
		raised := 1 // the race; the pageable copies, as they cost
		if pageable.Level != lint.LevelNote {
			raised++
		}
		if !ok || !strings.Contains(section, "error: [cross-stream-race]") || !strings.Contains(section, "[pageable-copy-loop]") ||
			!strings.Contains(section, "(1 more in cudatap lint)") || strings.Count(section, "fix: ") != raised {
			t.Errorf("export summary:\n%s", summary)
		}
		if race.Level != lint.LevelError || pageable.Cost.Kind != lint.CostBlocked || pageable.Cost.Ns == 0 || pageable.Cost.AtMost {
			t.Errorf("race %s, pageable cost %+v", race.Level, pageable.Cost)
		}
	})
}

// TestLintErrors: what lint says about inputs it cannot read.
func TestLintErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.cudatap")
	os.WriteFile(garbage, []byte("not a recording"), 0o644)
	for _, c := range []struct {
		args []string
		says string
		code int
	}{
		{[]string{"lint", filepath.Join(dir, "missing.cudatap")}, "no such file", exitNotFound},
		{[]string{"lint", dir}, "is a directory", exitFailure},
		{[]string{"lint", garbage}, "not a cudatap recording", exitFailure},
		{[]string{"lint"}, "accepts 1 arg", exitUsage},
	} {
		_, _, err := run(t, c.args...)
		if exitCode(err) != c.code || err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: exit status %d, error %v; want %d and %q", c.args, exitCode(err), err, c.code, c.says)
		}
	}
}

// writeRecording writes r to a .cudatap file, its names first, its calls
// in time order, as the recorder would have.
func writeRecording(t *testing.T, r *synctest.Recording) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.NewHeader("cudatap-test", 0))
	if err != nil {
		t.Fatal(err)
	}
	w.Names(r.Names, true)
	evs := slices.Clone(r.Events)
	slices.SortStableFunc(evs, func(a, b *event.Event) int { return cmp.Compare(a.Start, b.Start) })
	for _, e := range evs {
		w.Event(event.Encode(nil, e))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.cudatap")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// lintLoop is a loop of iters steps: a pageable copy of 4 KiB on the
// legacy stream (from load_batch), a memset on stream A of the memory it
// wrote (a possible race unless clean), a launch on stream B and a sync
// of it (from train_step, 100 µs each).
func lintLoop(iters int, clean bool) *synctest.Recording {
	const (
		tid             = 4123
		sA, sB          = 0x55aa00, 0x55bb00
		dev, hostBuf    = 0x7f5500000000, 0x5555000000
		frameCopy, load = 0x7f0000001000, 0x555500002000
		step, kernel    = 0x555500003000, 0x401000
	)
	r := synctest.New(tid, "train")
	r.Thread(tid, "train")
	r.Frame(frameCopy, "cudaMemcpyAsync (libcudart.so.13)")
	r.Frame(load, "load_batch (train)")
	r.Frame(step, "train_step (train)")
	at := synctest.Base
	tick := func() uint64 { at += 200 * synctest.US; return at }
	r.Call(event.CudaMalloc, tid, tick(), 10*synctest.US, 0x7ffd1000, 16<<20).Out = dev
	r.StreamCreate(tid, tick(), sA)
	r.StreamCreate(tid, tick(), sB)
	for range iters {
		if !clean {
			synctest.Stack(r.Call(event.CudaMemcpyAsync, tid, tick(), 5*synctest.US, dev, hostBuf, 4096, uint64(event.HostToDevice), 0), frameCopy, load)
			r.Call(event.CudaMemsetAsync, tid, tick(), 0, dev, 0, 4096, sA)
		}
		r.Launch(tid, tick(), sB, kernel)
		synctest.Stack(r.StreamSync(tid, tick(), 100*synctest.US, sB), frameCopy, step)
	}
	return r
}

// TestLintFailOn: --fail-on LEVEL exits 7 when a finding at that level or
// a more severe one fired, names them, and otherwise changes nothing; an
// unknown level is a usage error.
func TestLintFailOn(t *testing.T) {
	// Fires an error (the race), a warning (a sync after every launch) and
	// notes (pageable and legacy copies: 5 µs of each 800 µs step).
	loop := writeRecording(t, lintLoop(12, false))
	// Two steps, a sync each: nothing fires.
	clean := writeRecording(t, lintLoop(2, true))
	doc := lintJSON(t, loop)
	var got []string
	for _, f := range doc.Findings {
		got = append(got, string(f.Level)+" "+string(f.ID))
	}
	if want := []string{"error cross-stream-race", "warning sync-every-launch", "note pageable-copy-loop", "note legacy-nonblocking-copy"}; !slices.Equal(got, want) {
		t.Fatalf("findings %v, want %v", got, want)
	}
	for _, c := range []struct {
		args  []string
		code  int
		names string // in the error
	}{
		{[]string{"lint", loop}, 0, ""},
		{[]string{"lint", "--fail-on", "error", loop}, exitLint, "lint: 1 finding at --fail-on error or above: error cross-stream-race in train (pid 4123)"},
		{[]string{"lint", "--fail-on", "warning", loop}, exitLint, "2 findings at --fail-on warning or above: error cross-stream-race in train (pid 4123); warning sync-every-launch"},
		{[]string{"lint", "--fail-on", "note", "--json", loop}, exitLint, "4 findings at --fail-on note or above"},
		{[]string{"lint", "--fail-on", "note", clean}, 0, ""},
		{[]string{"lint", "--fail-on", "fatal", loop}, exitUsage, "--fail-on: unknown lint level \"fatal\": give error, warning or note"},
	} {
		stdout, _, err := run(t, c.args...)
		if exitCode(err) != c.code || c.names != "" && (err == nil || !strings.Contains(err.Error(), c.names)) {
			t.Errorf("%v: exit %d, %v; want %d and %q", c.args, exitCode(err), err, c.code, c.names)
		}
		if c.code != exitUsage && stdout == "" {
			t.Errorf("%v wrote nothing", c.args)
		}
	}
	if out, _, err := run(t, "__complete", "lint", "--fail-on", ""); err != nil || !strings.HasPrefix(out, "error\t") || !strings.Contains(out, "\nwarning\t") || !strings.Contains(out, "\nnote\t") {
		t.Errorf("completing --fail-on: %v\n%s", err, out)
	}
}

// TestLintsInReportAndJSON: `cudatap report` shows the lints (terminal:
// the raised ones with their cost and fix, the notes a line each), and
// `report --json` and `export --json` have them priced.
func TestLintsInReportAndJSON(t *testing.T) {
	rec := writeRecording(t, lintLoop(12, false))
	stdout, stderr, err := run(t, "report", rec)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, stderr)
	}
	_, section, ok := strings.Cut(stdout, "\nlints: 4 findings fired: 1 error, 1 warning, 2 notes (cudatap lint "+rec+" shows every example and the rules)\n")
	if !ok {
		t.Fatalf("no lints section:\n%s", stdout)
	}
	for _, s := range []string{"error: [cross-stream-race]", "warning: [sync-every-launch]", "cost: 1.2 ms blocked on the host (", "fix: order the use after the write",
		"notes: each cost less than 1% of its process's traced time", "  [legacy-nonblocking-copy] train (pid 4123):", "cudatap report: train (pid 4123)", "lints raised: 1 error, 1 warning (see Lints)"} {
		if !strings.Contains(section, s) {
			t.Errorf("report lacks %q:\n%s", s, section)
		}
	}
	type summary struct {
		Schema int            `json:"schema"`
		Lints  []lint.Finding `json:"lints"`
		Limits *lint.Limits   `json:"lint_limits"`
	}
	for _, cmd := range []string{"report", "export"} {
		stdout, stderr, err := run(t, cmd, "--json", rec)
		if err != nil {
			t.Fatalf("%s --json: %v\n%s", cmd, err, stderr)
		}
		var s summary
		if err := json.Unmarshal([]byte(stdout), &s); err != nil {
			t.Fatalf("%s --json: %v\n%s", cmd, err, stdout)
		}
		if s.Schema != summarySchema || len(s.Lints) != 4 || s.Limits == nil || s.Lints[0].Level != lint.LevelError || s.Lints[1].ID != lint.SyncEveryLaunch ||
			s.Lints[1].Cost.Ns != 12*100*synctest.US || s.Lints[1].Cost.Kind != lint.CostBlocked || s.Lints[1].Cost.AtMost || s.Lints[3].Level != lint.LevelNote {
			t.Errorf("%s --json lints: %+v", cmd, s.Lints)
		}
	}
}
