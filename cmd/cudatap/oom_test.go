package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/probe"
)

const mib = 1 << 20

// TestOOMScenarios records the simulated workload running out of device
// memory (scenario oom and oom-exit, csrc/workload.c: 1 GiB, held at four
// places through four APIs, then 2 GiB asked twice) and checks that the
// failure is the verdict everywhere: the summary's first line, the
// report's first finding (terminal and page), the lint (an error, exit 7
// with --fail-on error) and the JSON record, with the size, the line, who
// held what, and whether the process recovered or died of it.
func TestOOMScenarios(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)

	t.Run("recovers", func(t *testing.T) {
		rec, rep := recordScenario(t, b, "oom", 1, 1)
		for sym, n := range map[string]int{"cudaMalloc": 4, "cudaMallocPitch": 1, "cudaMallocManaged": 30, "cudaMallocFromPoolAsync": 1, "cuMemCreate": 1} {
			if rep.Calls[sym] != n {
				t.Fatalf("the workload made %d %s, the test expects %d", rep.Calls[sym], sym, n)
			}
		}
		r := checkOOMRecord(t, rec, rep, true, true)
		if r.RecoveredAfterNs == 0 {
			t.Errorf("recovered after %d ns", r.RecoveredAfterNs)
		}

		summary, stderr, err := run(t, "export", rec)
		if err != nil {
			t.Fatalf("export: %v\n%s", err, stderr)
		}
		first := strings.SplitN(summary, "\n", 3)[1]
		for _, s := range []string{"verdict: out of memory: workload (pid ", "): cudaMalloc of 2.0 GiB failed (out of memory) at +",
			", 2 attempts, at oom_ask (workload); it held 1004.0 MiB through CUDA (400.0 MiB at oom_hold_params (workload), 300.0 MiB at oom_hold_grads (workload), 240.0 MiB at oom_hold_acts (workload), 1 more); recovered: an allocation succeeded "} {
			if !strings.Contains(first, s) {
				t.Errorf("the summary's first verdict lacks %q:\n%s", s, summary)
			}
		}
		for _, s := range []string{"\n      64.0 MiB in 1 × cuMemCreate at oom_hold_segment (workload)\n",
			"\n    by API: cudaMalloc 400.0 MiB in 1, cudaMallocPitch 300.0 MiB in 1, cudaMallocManaged 240.0 MiB in 30, cuMemCreate 64.0 MiB in 1\n",
			"\n    released 4.0 MiB between its first and last attempt\n"} {
			if !strings.Contains(summary, s) {
				t.Errorf("the summary lacks %q:\n%s", s, summary)
			}
		}

		page := filepath.Join(t.TempDir(), "report.html")
		text, stderr, err := run(t, "report", rec, "-o", page)
		if err != nil {
			t.Fatalf("report: %v\n%s", err, stderr)
		}
		_, verdicts, _ := strings.Cut(text, "\nverdicts\n")
		if !strings.HasPrefix(verdicts, "  [high] out of memory: workload (pid ") || !strings.Contains(verdicts, "      where: oom_ask (workload)\n") {
			t.Errorf("the report's first verdict is not the failure:\n%s", text)
		}
		html, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		if _, findings, _ := strings.Cut(string(html), `<ul class="findings">`); !strings.HasPrefix(strings.TrimSpace(findings), `<li class="high"><span class="sev">high</span><span class="title">out of memory: workload (pid `) ||
			!strings.Contains(findings, "240.0 MiB in 30 × cudaMallocManaged at oom_hold_acts (workload)") {
			t.Errorf("the page's first verdict is not the failure")
		}

		doc := lintJSON(t, rec)
		if len(doc.Findings) != 1 || doc.Findings[0].ID != lint.OutOfMemory || doc.Findings[0].Level != lint.LevelError || doc.Findings[0].Count != 1 {
			t.Fatalf("lint findings %+v", doc.Findings)
		}
		ex := doc.Findings[0].Examples[0]
		if e := ex.Calls[0]; ex.Count != 2 || e.Role != "alloc" || e.Call != "cudaMalloc" || e.Site != "oom_ask (workload)" || !e.UserFrame ||
			e.Bytes != 2048*mib || e.Thread != "workload" || e.AtNs == 0 || e.Stream != -1 {
			t.Errorf("example %+v", ex)
		}
		if _, _, err := run(t, "lint", "--fail-on", "error", rec); exitCode(err) != exitLint || !strings.Contains(err.Error(), "error out-of-memory in workload (pid ") {
			t.Errorf("lint --fail-on error: exit %d, %v", exitCode(err), err)
		}
	})

	t.Run("dies", func(t *testing.T) {
		rec := filepath.Join(t.TempDir(), "oom-exit.cudatap")
		f, err := os.Create(rec)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		var stdout bytes.Buffer
		out, err := tracer.Run(context.Background(), tracer.Config{
			Command: []string{b.Workload, "--scenario", "oom-exit"},
			Stacks:  probe.StacksSync, NVMLInterval: -1, Duration: time.Minute,
			Stdout: &stdout, Stderr: os.Stderr, Recording: f,
		})
		if err != nil {
			t.Fatal(err)
		}
		if out.Exit.Code != 3 || out.Exit.Stopped {
			t.Fatalf("the workload ended %+v, want exit status 3", out.Exit)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		rep, err := sim.ParseReport(stdout.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		// A process that dies at once may be gone before its stacks are
		// named (as any: the names come from it while it lives).
		if r := checkOOMRecord(t, rec, rep, false, false); r.CallsAfter != 0 {
			t.Errorf("%d calls after the failure, the workload made none", r.CallsAfter)
		}
		summary, _, err := run(t, "export", rec)
		if first := strings.SplitN(summary, "\n", 3)[1]; err != nil || !strings.HasSuffix(first, "; did not recover: the failed allocation was its last CUDA call") {
			t.Errorf("summary: %v\n%s", err, summary)
		}
	})
}

// checkOOMRecord reads the JSON summary of rec and checks its one
// out-of-memory record against what the workload did; with named, also
// the lines (the workload's functions) and its thread's name.
func checkOOMRecord(t *testing.T, rec string, rep *sim.Report, recovered, named bool) oom.Record {
	t.Helper()
	stdout, stderr, err := run(t, "export", "--json", rec)
	if err != nil {
		t.Fatalf("export --json: %v\n%s", err, stderr)
	}
	var s struct {
		OOMs      []oom.Record `json:"ooms"`
		Processes []struct {
			PID  uint32 `json:"pid"`
			OOMs int64  `json:"ooms"`
		} `json:"processes"`
	}
	if err := json.Unmarshal([]byte(stdout), &s); err != nil {
		t.Fatalf("export --json: %v\n%s", err, stdout)
	}
	if len(s.OOMs) != 1 || len(s.Processes) != 1 || s.Processes[0].OOMs != 1 {
		t.Fatalf("ooms %+v, processes %+v", s.OOMs, s.Processes)
	}
	r := s.OOMs[0]
	if named && (r.Site != "oom_ask (workload)" || !r.UserFrame || r.Thread != "workload") {
		t.Errorf("the failed call at %q (user frame %v), thread %q", r.Site, r.UserFrame, r.Thread)
	}
	if r.PID != uint32(rep.PID) || r.Call != "cudaMalloc" || r.Bytes != 2048*mib || r.Attempts != 2 ||
		r.Device != 0 || r.AtNs == 0 || r.Held != 1004*mib || r.HeldAllocations != 33 || r.HeldSinceAttach ||
		r.Released != 4*mib || r.Recovered != recovered || len(r.GPUs) != 0 || r.NVML != "not sampled: disabled (--nvml-interval < 0)" {
		t.Errorf("record %+v", r)
	}
	want := []oom.Holder{
		{Bytes: 400 * mib, Count: 1, API: "cudaMalloc", Site: "oom_hold_params (workload)"},
		{Bytes: 300 * mib, Count: 1, API: "cudaMallocPitch", Site: "oom_hold_grads (workload)"},
		{Bytes: 240 * mib, Count: 30, API: "cudaMallocManaged", Site: "oom_hold_acts (workload)"},
		{Bytes: 64 * mib, Count: 1, API: "cuMemCreate", Site: "oom_hold_segment (workload)"},
	}
	if len(r.Holders) != len(want) {
		t.Fatalf("holders %+v", r.Holders)
	}
	for i, w := range want {
		h := r.Holders[i]
		if h.Bytes != w.Bytes || h.Count != w.Count || h.API != w.API || named && (h.Site != w.Site || !h.UserFrame) || h.Kind != "" || h.Sites != 1 {
			t.Errorf("holder %d: %+v, want %+v", i, h, w)
		}
		if r.ByAPI[i].API != w.API || r.ByAPI[i].Bytes != w.Bytes || r.ByAPI[i].Count != w.Count {
			t.Errorf("by API %d: %+v", i, r.ByAPI[i])
		}
	}
	return r
}
