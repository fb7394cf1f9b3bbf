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

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// TestPageRendersEverything draws, in headless Chromium, a page with
// every kind of row and both kinds of drawing: NVML series, a recording
// larger than the detail limit (occupancy outside the window), bounded,
// measured and unbounded ops, holds, syncs. The whole recording is shown
// (#fit), so the aggregated buckets are drawn too; no error may occur.
func TestPageRendersEverything(t *testing.T) {
	browser := testutil.Chromium(t)
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
	var buf strings.Builder
	if err := rep.WriteHTML(&buf, ""); err != nil {
		t.Fatal(err)
	}
	// Then a user: hover every row, click, zoom, pan, keys, buttons,
	// checkboxes, a gap's link. Errors land in #console-errors.
	dom := render(t, browser, strings.Replace(buf.String(), "</body>", "<script>"+interact+"</script></body>", 1))
	if !strings.Contains(dom, `data-interacted="ok"`) {
		t.Errorf("the interactions did not finish")
	}
	if m := regexp.MustCompile(`data-tips="(\d+)"`).FindStringSubmatch(dom); m == nil || m[1] == "0" {
		t.Errorf("hovering showed no details: %v", m)
	}
	drawn := map[string]int{}
	for _, m := range regexp.MustCompile(`<div class="row [a-z]+"[^>]*data-first="(\d+)"[^>]*>([^<]*)</div>`).FindAllStringSubmatch(dom, -1) {
		drawn[m[2]], _ = strconv.Atoi(m[1])
	}
	for _, row := range []string{"train (tid 700)", "stream 1 (blocking, prio 0)", "stream 2 (non-blocking, prio 0)", "utilization (%)", "memory used (1.0 GiB total)", "SM clock (MHz)", "launches per second"} {
		if drawn[row] == 0 {
			t.Errorf("row %q not drawn: %v", row, drawn)
		}
	}
}

// TestLintsRenderInChromium: the page of a recording whose lints fire
// renders them with no error.
func TestLintsRenderInChromium(t *testing.T) {
	browser := testutil.Chromium(t)
	var buf strings.Builder
	if err := lintsReport().WriteHTML(&buf, ""); err != nil {
		t.Fatal(err)
	}
	dom := render(t, browser, buf.String())
	if n := strings.Count(dom, `<li class="error" data-lint=`) + strings.Count(dom, `<li class="warning" data-lint=`); n != 3 {
		t.Errorf("%d lints raised in the DOM, want 3", n)
	}
}

// render opens the page in headless Chromium (the whole recording: #fit)
// and returns its DOM once its script ran, failing on any error it
// reported or logged.
func render(t *testing.T, browser, html string) string {
	t.Helper()
	page := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(page, []byte(html), 0o644); err != nil {
		t.Fatal(err)
	}
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
	return dom
}

// interact plays a user on the page's timeline.
const interact = `
(function () {
  var canvas = document.querySelector('#tl-canvas canvas'), tip = document.getElementById('tl-tip');
  var box = canvas.getBoundingClientRect(), tips = 0;
  function ev(type, x, y, extra) {
    var init = Object.assign({ bubbles: true, cancelable: true, clientX: box.left + x, clientY: box.top + y, buttons: 0 }, extra || {});
    canvas.dispatchEvent(type === 'wheel' ? new WheelEvent(type, init) : new MouseEvent(type, init));
  }
  var labels = document.querySelectorAll('#tl-labels div.row');
  labels.forEach(function (l) { l.dataset.first = l.dataset.drawn; }); // what the first view drew
  var top0 = document.getElementById('tl-labels').getBoundingClientRect().top;
  labels.forEach(function (l) {
    var y = l.getBoundingClientRect().top - top0 + l.offsetHeight / 2;
    for (var x = 2; x < box.width; x += 3) {
      ev('mousemove', x, y);
      if (tip.style.display === 'block' && tip.innerHTML) { tips++; }
      if (x % 60 === 2) { ev('click', x, y); }
    }
    ev('mousemove', box.width / 2, y + l.offsetHeight / 2 - 3);
  });
  ev('mouseleave', 0, 0);
  ev('wheel', box.width / 3, 40, { deltaY: -300 });
  ev('wheel', box.width / 3, 40, { deltaY: 200, shiftKey: true });
  ev('mousedown', 300, 40, { buttons: 1 });
  window.dispatchEvent(new MouseEvent('mousemove', { clientX: box.left + 200, clientY: box.top + 40, buttons: 1 }));
  window.dispatchEvent(new MouseEvent('mouseup', {}));
  ev('dblclick', 100, 40);
  ['w', 's', 'a', 'd'].forEach(function (k) { document.dispatchEvent(new KeyboardEvent('keydown', { key: k, bubbles: true })); });
  ['tl-fit', 'tl-in', 'tl-out', 'tl-window'].forEach(function (id) { var b = document.getElementById(id); if (b) { b.click(); } });
  ['tl-deps', 'tl-queue'].forEach(function (id) { var c = document.getElementById(id); c.click(); c.click(); });
  var z = document.querySelector('a.zoom');
  if (z) { z.click(); }
  window.dispatchEvent(new Event('resize'));
  document.body.dataset.tips = tips;
  document.body.dataset.interacted = 'ok';
})();
`
