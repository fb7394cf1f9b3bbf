package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
)

// renderDOM opens page in headless Chromium and returns the DOM once its
// scripts ran, and what the browser logged.
func renderDOM(t *testing.T, browser, page string) (dom, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--enable-logging=stderr", "--v=0", "--user-data-dir="+t.TempDir(), "--window-size=1400,1000",
		"--dump-dom", "file://"+page)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v\n%s", page, err, stderr.String())
	}
	return string(out), stderr.String()
}

// TestReportInChromium records the simulated workload with --report and
// makes the report of the recording with `cudatap report`, then opens
// both pages in headless Chromium: they render with no error, the
// timeline has a row with slices drawn for each of the workload's
// streams, and the analyses show the workload's numbers, known exactly
// from its own account of its calls.
func TestReportInChromium(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	browser := testutil.Chromium(t)
	b := testutil.Sim(t)
	const iters, streams = 20, 3
	workload := []string{b.Workload, "--scenario", "basic", "--iters", strconv.Itoa(iters), "--streams", strconv.Itoa(streams)}
	untraced, err := exec.Command(workload[0], workload[1:]...).Output()
	if err != nil {
		t.Fatal(err)
	}
	want, err := sim.ParseReport(untraced)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	rec, live, page := filepath.Join(dir, "run.cudatap"), filepath.Join(dir, "live.html"), filepath.Join(dir, "report.html")
	if _, stderr, err := run(t, append([]string{"record", "--nvml-interval=-1s", "-o", rec, "--report", live, "--"}, workload...)...); err != nil {
		t.Fatalf("record --report: %v\n%s", err, stderr)
	}
	stdout, stderr, err := run(t, "report", rec, "-o", page)
	if err != nil {
		t.Fatalf("report: %v\n%s", err, stderr)
	}
	for _, s := range []string{"cudatap summary:", "cudatap report:", "verdicts", "pageable_memcpy", "top GPU operations by count", "device memory reserved through CUDA", "bounds",
		"\nlints: 2 findings fired: 1 error, ", "error: [cross-stream-race]", "[pageable-copy-loop]", "lints raised: 1 error"} {
		if !strings.Contains(stdout, s) {
			t.Errorf("terminal report lacks %q:\n%s", s, stdout)
		}
	}
	for _, f := range []string{filepath.Join(dir, "report.gpu_inuse.pb.gz"), filepath.Join(dir, "live.gpu_inuse.pb.gz")} {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatalf("memory profile: %v", err)
		}
		p, err := profile.Parse(fh)
		fh.Close()
		if err != nil || p.CheckValid() != nil {
			t.Errorf("%s: %v %v", f, err, p.CheckValid())
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// A recording cut short (a killed recorder) still makes a report, of
	// what came before the cut, and exits 6.
	whole, err := os.ReadFile(rec)
	if err != nil {
		t.Fatal(err)
	}
	cut, cutPage := filepath.Join(dir, "cut.cudatap"), filepath.Join(dir, "cut.html")
	if err := os.WriteFile(cut, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, stderr, err := run(t, "report", cut, "-o", cutPage, "--memory-profile", "none"); exitCode(err) != exitPartial || !strings.Contains(stderr, "truncated") {
		t.Errorf("report of a cut recording: %v (exit %d)\n%s", err, exitCode(err), stderr)
	}
	if _, err := os.Stat(cutPage); err != nil {
		t.Errorf("no report of the cut recording: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cut.gpu_inuse.pb.gz")); err == nil {
		t.Error("--memory-profile none wrote a profile")
	}

	launches := want.Calls["cudaLaunchKernel"]
	gpuOps := launches + want.Calls["cudaMemcpyAsync"] + want.Calls["cudaMemsetAsync"]
	for _, p := range []string{page, live} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			dom, log := renderDOM(t, browser, p)
			if !strings.Contains(dom, `data-render="ok"`) {
				t.Errorf("the page's script did not finish rendering:\n%s", tail(dom, 3000))
			}
			if m := regexp.MustCompile(`(?s)<ol id="console-errors"[^>]*>(.*?)</ol>`).FindStringSubmatch(dom); m == nil || strings.TrimSpace(m[1]) != "" {
				t.Errorf("the page reported errors: %v", m)
			}
			for _, line := range strings.Split(log, "\n") {
				if strings.Contains(line, "CONSOLE") && (strings.Contains(strings.ToLower(line), "error") || strings.Contains(line, "Uncaught")) {
					t.Errorf("console: %s", line)
				}
			}

			// A timeline row per stream, with slices drawn in the first view.
			rows := map[string]int{}
			for _, m := range regexp.MustCompile(`<div class="row (?:host|gpu|counter)"[^>]*data-drawn="(\d+)"[^>]*>([^<]*)</div>`).FindAllStringSubmatch(dom, -1) {
				n, _ := strconv.Atoi(m[1])
				rows[m[2]] = n
			}
			wantRows := []string{"stream 0 (legacy default)", "stream 1 (blocking, prio 0)", "stream 2 (non-blocking, prio 0)", "stream 3 (blocking, prio -1)",
				"device memory in use (reserved through CUDA)", "launches per second"}
			for _, r := range wantRows {
				if rows[r] == 0 {
					t.Errorf("timeline row %q missing or empty; rows: %v", r, rows)
				}
			}

			// The analyses, with the workload's numbers.
			for _, id := range []string{"verdicts", "lints", "timeline", "syncs", "overlap", "gaps", "queues", "kernels", "memory", "bounds"} {
				if !strings.Contains(dom, `<section id="`+id+`">`) {
					t.Errorf("no section #%s", id)
				}
			}
			// basic's lints (TestLintScenarios): a possible race, and its
			// pageable read-back every iteration.
			if !strings.Contains(dom, `<li class="error" data-lint="cross-stream-race" data-level="error"`) || !strings.Contains(dom, `data-lint="pageable-copy-loop"`) {
				t.Errorf("the lints section lacks basic's race and pageable copies")
			}
			kernels := attrInts(dom, `<tr data-name="sim_(?:gemm|relu)_kernel" data-count="(\d+)"`)
			copies := attrInts(dom, `<tr data-name="Memcpy [^"]*" data-count="(\d+)"`)
			memsets := attrInts(dom, `<tr data-name="Memset" data-count="(\d+)"`)
			if sum(kernels) != launches || sum(copies) != want.Calls["cudaMemcpyAsync"] || sum(memsets) != want.Calls["cudaMemsetAsync"] {
				t.Errorf("top ops: kernels %v (want %d), copies %v (want %d), memsets %v (want %d)", kernels, launches,
					copies, want.Calls["cudaMemcpyAsync"], memsets, want.Calls["cudaMemsetAsync"])
			}
			if ops := attrInts(dom, `<tr data-device="0" data-ops="(\d+)"`); sum(ops) != gpuOps {
				t.Errorf("overlap table: ops %v, want %d", ops, gpuOps)
			}
			if ops := attrInts(dom, `<tr data-stream="\d+" data-ops="(\d+)"`); len(ops) != streams+1 || sum(ops) != gpuOps {
				t.Errorf("queues table: ops per stream %v, want %d in %d streams", ops, gpuOps, streams+1)
			}
			if l := attrInts(dom, `data-launches="(\d+)"`); sum(l) != launches {
				t.Errorf("launches per stream %v, want %d", l, launches)
			}
			syncs := map[string]int{}
			for _, m := range regexp.MustCompile(`<tr data-kind="([a-z_]+)" data-count="(\d+)"><td>[^<]*(?:<span[^>]*>[^<]*</span>)?</td>(?:<td[^>]*>[^<]*</td>){4}<td><code>([A-Za-z_]+)</code>`).FindAllStringSubmatch(dom, -1) {
				n, _ := strconv.Atoi(m[2])
				syncs[m[1]+" "+m[3]] += n
			}
			for site, n := range map[string]int{
				"pageable_memcpy cudaMemcpyAsync":   want.Calls["cudaMemcpyAsync"] / 2, // the DtoH copy of each iteration, to pageable memory
				"stream_sync cudaStreamSynchronize": want.Calls["cudaStreamSynchronize"],
				"device_sync cudaDeviceSynchronize": want.Calls["cudaDeviceSynchronize"],
				"free_sync cudaFree":                want.Calls["cudaFree"],
				"free_sync cudaFreeHost":            want.Calls["cudaFreeHost"],
			} {
				if syncs[site] != n {
					t.Errorf("sync site %s: %d, want %d (all: %v)", site, syncs[site], n, syncs)
				}
			}
			mem := regexp.MustCompile(`data-allocs="(\d+)" data-frees="(\d+)" data-peak="(\d+)" data-never-freed="(\d+)"`).FindStringSubmatch(dom)
			if mem == nil || mem[1] != strconv.Itoa(want.Calls["cudaMalloc"]) || mem[2] != strconv.Itoa(want.Calls["cudaFree"]) || mem[4] != "0" || mem[3] != strconv.Itoa(2<<20) {
				// basic: a 1 MiB buffer for the run, another 1 MiB allocated and freed every 10th iteration.
				t.Errorf("memory: %v, want %d allocations, %d frees, a 2 MiB peak, nothing left", mem, want.Calls["cudaMalloc"], want.Calls["cudaFree"])
			}
		})
	}
}

func attrInts(dom, pattern string) []int {
	var out []int
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(dom, -1) {
		n, _ := strconv.Atoi(m[1])
		out = append(out, n)
	}
	return out
}

func sum(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestReportRejectsBadInput: what report refuses before reading anything.
func TestReportRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	rec := filepath.Join(dir, "r.cudatap")
	if err := os.WriteFile(rec, []byte("not a recording"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"report", dir}, "is a directory", exitFailure},
		{[]string{"report", filepath.Join(dir, "missing.cudatap")}, "no such file", exitNotFound},
		{[]string{"report", rec, "-o", filepath.Join(dir, "out.json")}, "give the HTML report a .html name", exitUsage},
		{[]string{"report", rec, "-o", filepath.Join(dir, "nodir", "out.html")}, "cannot write output", exitFailure},
		{[]string{"report", rec}, "not a cudatap recording", exitFailure},
		{[]string{"report", rec, "-o", filepath.Join(dir, "out.html")}, "not a cudatap recording", exitFailure},
	} {
		_, _, err := run(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || exitCode(err) != tc.code {
			t.Errorf("%v: %v (exit %d), want %q (exit %d)", tc.args, err, exitCode(err), tc.want, tc.code)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out.html")); err == nil {
		t.Error("a report was written for a bad recording")
	}
}
