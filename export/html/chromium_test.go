package html

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

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// chromium finds a headless Chromium; none is a skip, except under CI
// (make test-deps installs Debian's).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: run `make test-deps` (apt-get install chromium)")
	}
	t.Skip("no chromium on PATH (make test-deps installs it; under CI this fails)")
	return ""
}

// TestPageRendersEverything draws, in headless Chromium, a page with
// every kind of row and both kinds of drawing: NVML series, a recording
// larger than the detail limit (occupancy outside the window), bounded,
// measured and unbounded ops, holds, syncs. The whole recording is shown
// (#fit), so the aggregated buckets are drawn too; no error may occur.
func TestPageRendersEverything(t *testing.T) {
	browser := chromium(t)
	w := newWorld(Options{MaxSlices: 30, Buckets: 64, Version: "test"})
	tp := &tape{}
	w.sink = model.Sinks{w.c, tp}
	w.sink.Hold(w.p, &model.Hold{TID: mainTID, Start: base, End: base + 5*us})
	for i := range uint64(40) {
		at := i * 10 * us
		w.call(event.CudaLaunchKernel, at, at, func(c *model.Call) { c.Stream, c.Args.Func = 1, gemm })
		w.op(model.OpKernel, 1, at/us, at/us, at/us+5, i%3 == 0)
	}
	w.syncCall(event.CudaStreamSynchronize, 400*us, 450*us, model.SyncStream, 1)
	w.op(model.OpMemcpy, 2, 300, 300, 380, false)
	w.sink.GPUOp(w.p, &model.GPUOp{ID: 99, Stream: 2, Call: -1, Enqueued: base + 390*us, Start: base + 390*us, End: base + 390*us,
		After: 0, AfterStream: 1, TID: mainTID, Kind: model.OpMemcpy, CopyKind: event.DeviceToHost}) // never proven: no length, waits on stream 1
	r := w.result()
	for i := range uint64(50) {
		r.Counters = append(r.Counters, model.Counter{Device: 0, Name: "GPU 0 Test", TS: base + i*10*us,
			Values: map[string]float64{"gpu_util_pct": float64(i), "mem_util_pct": 10, "mem_used_bytes": float64(i << 20), "mem_total_bytes": 1 << 30, "sm_clock_mhz": 1980}})
	}
	from, to, need := w.c.DetailWindow()
	if !need {
		t.Fatal("the recording should exceed the detail limit")
	}
	tp.play(w.c.DetailPass(from, to))
	rep := w.c.Build(r)
	page := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f, ""); err != nil {
		t.Fatal(err)
	}
	f.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--enable-logging=stderr", "--v=0", "--user-data-dir="+t.TempDir(), "--window-size=1400,1000",
		"--dump-dom", "file://"+page+"#fit")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	dom := string(out)
	if !strings.Contains(dom, `data-render="ok"`) {
		t.Errorf("not rendered")
	}
	if m := regexp.MustCompile(`(?s)<ol id="console-errors"[^>]*>(.*?)</ol>`).FindStringSubmatch(dom); m == nil || strings.TrimSpace(m[1]) != "" {
		t.Errorf("errors: %v", m)
	}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "CONSOLE") {
			t.Errorf("console: %s", line)
		}
	}
	drawn := map[string]int{}
	for _, m := range regexp.MustCompile(`<div class="row [a-z]+"[^>]*data-drawn="(\d+)"[^>]*>([^<]*)</div>`).FindAllStringSubmatch(dom, -1) {
		drawn[m[2]], _ = strconv.Atoi(m[1])
	}
	for _, row := range []string{"train (tid 700)", "stream 1 (blocking, prio 0)", "stream 2 (non-blocking, prio 0)", "utilization (%)", "memory used (1.0 GiB total)", "SM clock (MHz)", "launches per second"} {
		if drawn[row] == 0 {
			t.Errorf("row %q not drawn: %v", row, drawn)
		}
	}
}
