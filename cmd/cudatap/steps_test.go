package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/perfetto/perfettotest"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/internal/testutil"
)

// stepsSeen are the ProfilerStep#N slices of a Chrome trace, by N: their
// thread, category and span.
func stepsSeen(t *testing.T, path string) map[int]map[string]any {
	t.Helper()
	out := map[int]map[string]any{}
	for _, ev := range readChrome(t, path).TraceEvents {
		name, _ := ev["name"].(string)
		var n int
		if _, err := fmt.Sscanf(name, "ProfilerStep#%d", &n); err == nil && ev["ph"] == "X" {
			out[n] = ev
		}
	}
	return out
}

// TestStepsFound records the simulated training loop (scenario train: N
// iterations, each ending in a read-back as .item() makes it, every 4th
// logging too) and checks that cudatap finds its N steps without the
// program's help: the summary's table and JSON say N steps marked by the
// read-back's wait, each with the GPU time CUPTI measured; both traces
// carry ProfilerStep#1..N on the program's thread, back to back; and
// HolisticTraceAnalysis's per-step analyses find the N steps, each with
// host calls and kernels, and a step's critical path (testdata/hta).
func TestStepsFound(t *testing.T) {
	testutil.RequireRoot(t)
	py := htaPython(t)
	b := testutil.Sim(t)
	const n = 12
	dir := t.TempDir()
	js, pf, rec := filepath.Join(dir, "trace.json"), filepath.Join(dir, "trace.perfetto-trace"), filepath.Join(dir, "run.cudatap")
	stdout, stderr, err := run(t, "record", "--json", "--nvml-interval=-1s", "-o", js, "-o", pf, "-o", rec, "--", b.Workload, "--scenario", "train", "--iters", fmt.Sprint(n))
	if err != nil {
		t.Fatalf("record: %v\n%s", err, stderr)
	}
	var sum struct {
		Steps []steps.Found `json:"steps"`
	}
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("summary JSON: %v\n%s", err, stdout)
	}
	if len(sum.Steps) != 1 {
		t.Fatalf("steps of %d processes, want 1: %+v", len(sum.Steps), sum.Steps)
	}
	f := sum.Steps[0]
	if f.By != steps.BySync || len(f.Steps) != n || !strings.Contains(f.Marker, "train_read_loss") || !strings.Contains(f.Marker, "cudaStreamSynchronize") {
		t.Fatalf("found %s %q, %d steps (%s), want %d marked by train_read_loss's sync", f.By, f.Marker, len(f.Steps), f.Why, n)
	}
	if !f.GPUMeasured || f.GPUMedianNs == 0 || f.MedianNs < f.GPUMedianNs/2 || f.P90Ns < f.MedianNs {
		t.Errorf("step times: median %d p90 %d, GPU median %d (measured %v)", f.MedianNs, f.P90Ns, f.GPUMedianNs, f.GPUMeasured)
	}
	for i, s := range f.Steps {
		// The batch copy, five launches and the read-back's copy; the
		// step after a logged iteration the log's copy too (the log's wait
		// comes after the read-back that ends the step).
		want := 7
		if i > 0 && i%4 == 0 {
			want = 8
		}
		if s.N != i+1 || s.GPUOps != want || s.Unmeasured != 0 || (i > 0 && s.StartNs != f.Steps[i-1].EndNs) {
			t.Errorf("step %d: #%d, %d GPU ops measured, %d not, want %d; [%d, %d]", i+1, s.N, s.GPUOps, s.Unmeasured, want, s.StartNs, s.EndNs)
		}
	}

	// report --json finds the same steps in the recording.
	again, stderr, err := run(t, "report", "--json", rec)
	if err != nil {
		t.Fatalf("report --json: %v\n%s", err, stderr)
	}
	var rsum struct {
		Steps []steps.Found `json:"steps"`
	}
	if err := json.Unmarshal([]byte(again), &rsum); err != nil {
		t.Fatalf("report's JSON: %v\n%s", err, again)
	}
	if len(rsum.Steps) != 1 || rsum.Steps[0].Marker != f.Marker || len(rsum.Steps[0].Steps) != n || rsum.Steps[0].Steps[n-1] != f.Steps[n-1] {
		t.Errorf("report --json steps %+v, want record's %+v", rsum.Steps, sum.Steps)
	}

	seen := stepsSeen(t, js)
	if len(seen) != n {
		t.Errorf("the Chrome trace has %d ProfilerStep slices, want %d", len(seen), n)
	}
	for i := 1; i <= n; i++ {
		ev := seen[i]
		if ev == nil || ev["cat"] != "user_annotation" || ev["tid"] != float64(f.TID) {
			t.Errorf("ProfilerStep#%d: %v", i, ev)
		}
	}
	data, err := os.ReadFile(pf)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := perfettotest.Read(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Problems {
		t.Error(p)
	}
	pfSteps := 0
	for _, s := range tr.Slices {
		if strings.HasPrefix(s.Name, "ProfilerStep#") && tr.Tracks[s.Track].Name == "steps" && tr.Tracks[tr.Tracks[s.Track].Parent].TID == int64(f.TID) {
			pfSteps++
		}
	}
	if pfSteps != n {
		t.Errorf("the Perfetto trace has %d ProfilerStep slices on the thread's steps track, want %d", pfSteps, n)
	}

	out, err := exec.Command(py, "../../testdata/hta/check.py", js, "--steps", fmt.Sprint(n)).CombinedOutput()
	t.Logf("HTA:\n%s", out)
	if err != nil {
		t.Errorf("HTA's per-step analyses: %v", err)
	}
}

// nvtxSlices counts a Chrome trace's NVTX slices (and marks) by name,
// "train step N" as "train step", with the args of the first of each.
func nvtxSlices(t *testing.T, path string) (map[string]int, map[string]map[string]any) {
	t.Helper()
	count, args := map[string]int{}, map[string]map[string]any{}
	for _, ev := range readChrome(t, path).TraceEvents {
		a, _ := ev["args"].(map[string]any)
		if ev["cat"] != "user_annotation" || a["source"] != "nvtx" {
			continue
		}
		name, _ := ev["name"].(string)
		if strings.HasPrefix(name, "train step ") {
			name = "train step"
		}
		if ev["ph"] == "i" {
			name += " (mark)"
		}
		if count[name] == 0 {
			args[name] = a
		}
		count[name]++
	}
	return count, args
}

// TestNVTXRanges launches the simulated training loop annotated with NVTX
// (scenario train-nvtx: its NVTX library hands every call to the injection
// library NVTX_INJECTION64_PATH names, as NVTX v3's headers do), with GPU
// times and without (NVTX needs no CUPTI): every range is in the trace
// once (not also seen by a probe on the library's symbols), named by its
// message (pushed, pushed with attributes, of a domain with a registered
// message, started and ended), the mark too; and the steps are the
// "train step N" ranges.
func TestNVTXRanges(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	const n = 6
	for _, gpu := range []string{"on", "off"} {
		t.Run("gpu-times "+gpu, func(t *testing.T) {
			dir := t.TempDir()
			js, rec, again := filepath.Join(dir, "trace.json"), filepath.Join(dir, "run.cudatap"), filepath.Join(dir, "again.json")
			stdout, stderr, err := run(t, "record", "--json", "--nvml-interval=-1s", "--gpu-times="+gpu, "-o", js, "-o", rec, "--",
				b.NVTXWorkload, "--scenario", "train-nvtx", "--iters", fmt.Sprint(n))
			if err != nil {
				t.Fatalf("record: %v\n%s", err, stderr)
			}
			count, args := nvtxSlices(t, js)
			// The recording keeps them: its export draws the same.
			if _, stderr, err := run(t, "export", "-q", rec, "-o", again); err != nil {
				t.Fatalf("export: %v\n%s", err, stderr)
			}
			if replayed, _ := nvtxSlices(t, again); !maps.Equal(replayed, count) {
				t.Errorf("the recording's export draws %v, the recording run %v", replayed, count)
			}
			want := map[string]int{"train step": n, "forward": n, "batch": n, "epoch": 1, "checkpoint (mark)": 1}
			for name, w := range want {
				if count[name] != w {
					t.Errorf("%d NVTX slices %q, want %d (all: %v)", count[name], name, w, count)
				}
			}
			if len(count) != len(want) {
				t.Errorf("NVTX slices %v, want %v", count, want)
			}
			if args["batch"]["domain"] != float64(1) || args["forward"]["depth"] != float64(1) || args["train step"]["depth"] != float64(0) {
				t.Errorf("args: batch %v, forward %v, train step %v", args["batch"], args["forward"], args["train step"])
			}
			var sum struct {
				Steps []steps.Found `json:"steps"`
			}
			if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
				t.Fatal(err)
			}
			if len(sum.Steps) != 1 || sum.Steps[0].By != steps.ByNVTX || sum.Steps[0].Marker != "train step #" || len(sum.Steps[0].Steps) != n {
				t.Errorf("steps: %+v", sum.Steps)
			}
			if seen := stepsSeen(t, js); len(seen) != n {
				t.Errorf("%d ProfilerStep slices, want %d", len(seen), n)
			}
		})
	}
}

// nvtxDrawn counts a Chrome trace's NVTX slices and marks by what they
// show: name ("train step N" as "train step"), kind (X a range, i a mark),
// depth and domain; and the distinct "train step N" names.
func nvtxDrawn(t *testing.T, path string) (map[string]int, map[string]bool) {
	t.Helper()
	drawn, stepNames := map[string]int{}, map[string]bool{}
	for _, ev := range readChrome(t, path).TraceEvents {
		a, _ := ev["args"].(map[string]any)
		if ev["cat"] != "user_annotation" || a["source"] != "nvtx" {
			continue
		}
		name, _ := ev["name"].(string)
		if strings.HasPrefix(name, "train step ") {
			stepNames[name] = true
			name = "train step"
		}
		drawn[fmt.Sprintf("%s %v depth=%v domain=%v", name, ev["ph"], a["depth"], a["domain"])]++
	}
	return drawn, stepNames
}

// TestNVTXForms: scenario nvtx-forms annotates a training loop through
// every form of NVTX's C API for ranges and marks (A, W, Ex with ASCII and
// wide messages, a domain's, nested, started and ended across the
// nesting). Attached to while it runs (record -p: uprobes on the exported
// NVTX functions of libnvToolsExt.so.1), every range and mark is in the
// trace once, named by its message, at its depth and in its domain, and
// the recording's export draws the same; launched (record --: the
// collector is NVTX's injection library, and the library is not hooked
// too), exactly the same is drawn, none twice. Both find the N steps of the
// "train step N" ranges.
func TestNVTXForms(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	bin := buildCudatap(t)
	const n = 5
	// Every range and mark once per iteration: its name, kind, depth and
	// domain (1: "data", the only other than the default).
	want := map[string]int{
		"train step X depth=0 domain=<nil>":       n,
		"forward X depth=1 domain=<nil>":          n,
		"backward X depth=1 domain=<nil>":         n,
		"batch X depth=0 domain=1":                n,
		"async io X depth=0 domain=<nil>":         n, // started: depth 0
		"read-back X depth=0 domain=<nil>":        n,
		"optimizer X depth=0 domain=1":            n,
		"epoch X depth=0 domain=<nil>":            1,
		"forward mark i depth=<nil> domain=<nil>": n,
		"batch mark i depth=<nil> domain=1":       n,
		"step done i depth=<nil> domain=<nil>":    n,
		"checkpoint i depth=<nil> domain=<nil>":   1,
	}
	drawn := map[string]map[string]int{}
	for _, mode := range []string{"attached", "launched"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			js, rec, again := filepath.Join(dir, "trace.json"), filepath.Join(dir, "run.cudatap"), filepath.Join(dir, "again.json")
			pf := filepath.Join(dir, "trace.perfetto-trace")
			args := []string{"record", "--json", "--nvml-interval=-1s", "-o", js, "-o", pf, "-o", rec}
			workload := []string{b.NVTXWorkload, "--scenario", "nvtx-forms", "--iters", fmt.Sprint(n)}
			var stdout []byte
			if mode == "launched" {
				out, stderr, err := run(t, slices.Concat(args, []string{"--gpu-times=off", "--"}, workload)...)
				if err != nil {
					t.Fatalf("record: %v\n%s", err, stderr)
				}
				stdout = []byte(out)
			} else {
				stdout = recordAttached(t, bin, args, workload)
			}
			got, stepNames := nvtxDrawn(t, js)
			drawn[mode] = got
			if !maps.Equal(got, want) {
				t.Errorf("NVTX drawn:\n%v\nwant\n%v", got, want)
			}
			for i := 1; i <= n; i++ {
				if !stepNames[fmt.Sprintf("train step %d", i)] {
					t.Errorf("no range \"train step %d\" (%v)", i, stepNames)
				}
			}
			if _, stderr, err := run(t, "export", "-q", rec, "-o", again); err != nil {
				t.Fatalf("export: %v\n%s", err, stderr)
			}
			if replayed, _ := nvtxDrawn(t, again); !maps.Equal(replayed, got) {
				t.Errorf("the recording's export draws\n%v\nthe recording run\n%v", replayed, got)
			}
			// Perfetto: the same ranges, each track's slices nested
			// (started ranges overlap: their lanes keep them apart).
			data, err := os.ReadFile(pf)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := perfettotest.Read(data)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tr.Problems {
				t.Error(p)
			}
			pfDrawn, chromeDrawn := map[string]int{}, map[string]int{}
			for _, sl := range tr.Slices {
				if sl.Args["source"] == "nvtx" {
					pfDrawn[strings.TrimRight(sl.Name, " 0123456789")]++
				}
			}
			for k, v := range got {
				chromeDrawn[k[:strings.LastIndex(k, " depth=")-2]] += v // the name, without " X" or " i"
			}
			if !maps.Equal(pfDrawn, chromeDrawn) {
				t.Errorf("Perfetto draws NVTX slices\n%v\nChrome\n%v", pfDrawn, chromeDrawn)
			}
			// ... each as long as in the Chrome trace (a range misnested
			// on its track would be ended by another's end).
			pfDur, chromeDur := map[string][]int64{}, map[string][]int64{}
			for _, sl := range tr.Slices {
				if sl.Args["source"] == "nvtx" && !sl.Instant {
					name := strings.TrimRight(sl.Name, " 0123456789")
					pfDur[name] = append(pfDur[name], int64(math.Round(float64(sl.End-sl.Start)/1e3)))
				}
			}
			for _, ev := range readChrome(t, js).TraceEvents {
				if a, _ := ev["args"].(map[string]any); a["source"] == "nvtx" && ev["ph"] == "X" {
					name := strings.TrimRight(ev["name"].(string), " 0123456789")
					chromeDur[name] = append(chromeDur[name], int64(math.Round(ev["dur"].(float64))))
				}
			}
			for name, d := range chromeDur {
				slices.Sort(d)
				slices.Sort(pfDur[name])
				if !slices.Equal(d, pfDur[name]) {
					t.Errorf("%q lasts %v µs in the Chrome trace, %v in the Perfetto trace", name, d, pfDur[name])
				}
			}
			var sum struct {
				Steps []steps.Found `json:"steps"`
			}
			if err := json.Unmarshal(stdout, &sum); err != nil {
				t.Fatalf("summary JSON: %v\n%s", err, stdout)
			}
			if len(sum.Steps) != 1 || sum.Steps[0].By != steps.ByNVTX || sum.Steps[0].Marker != "train step #" || len(sum.Steps[0].Steps) != n {
				t.Errorf("steps: %+v", sum.Steps)
			}
		})
	}
	if a, l := drawn["attached"], drawn["launched"]; a != nil && l != nil && !maps.Equal(a, l) {
		t.Errorf("attached, cudatap draws\n%v\nlaunched\n%v", a, l)
	}
}

// recordAttached starts workload held before its first call (--wait-stdin),
// records it with `cudatap record ARGS -p PID`, lets it go once record
// says it is attached, and returns record's stdout once both ended.
func recordAttached(t *testing.T, bin string, args, workload []string) []byte {
	t.Helper()
	w := exec.Command(workload[0], append([]string{"--wait-stdin"}, workload[1:]...)...)
	stdin, _ := w.StdinPipe()
	wout, _ := w.StdoutPipe()
	w.Stderr = os.Stderr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Process.Kill()
	wr := bufio.NewReader(wout)
	if line, err := wr.ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("workload did not get ready: %q %v", line, err)
	}
	rec := exec.Command(bin, append(args, "-p", strconv.Itoa(w.Process.Pid))...)
	var stdout bytes.Buffer
	rec.Stdout = &stdout
	rerr, _ := rec.StderrPipe()
	if err := rec.Start(); err != nil {
		t.Fatal(err)
	}
	defer rec.Process.Kill()
	var said strings.Builder // what record says, for errors
	sc := bufio.NewScanner(rerr)
	for sc.Scan() {
		said.WriteString(sc.Text() + "\n")
		if strings.HasPrefix(sc.Text(), "attached to 1 process") {
			break
		}
	}
	done := make(chan struct{})
	go func() {
		for sc.Scan() {
			said.WriteString(sc.Text() + "\n")
		}
		close(done)
	}()
	io.WriteString(stdin, "go\n")
	if rest, err := io.ReadAll(wr); err != nil || w.Wait() != nil {
		t.Fatalf("workload: %v\n%s", err, rest)
	}
	<-done // record ended: its stderr closed
	if err := rec.Wait(); err != nil {
		t.Fatalf("record: %v\n%s", err, said.String())
	}
	return stdout.Bytes()
}
