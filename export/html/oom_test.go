package html

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
)

// TestOOMFirst: a failed allocation is the report's first verdict, in the
// terminal and on the page, with its line, who held the memory, the
// device as NVML saw it and the outcome; the memory section still names
// the holders.
func TestOOMFirst(t *testing.T) {
	c := NewCollector(Options{Version: "test"})
	rep := c.Build(fixture.OOM(c, true))
	if len(rep.Findings) == 0 || rep.Findings[0].Severity != SevHigh || !strings.HasPrefix(rep.Findings[0].Title, "out of memory: python3 (pid 4200): cudaMalloc of 200.0 GiB failed") ||
		rep.Findings[0].Where != fixture.OOMLine || len(rep.Findings[0].Lines) == 0 {
		t.Fatalf("first finding: %+v", rep.Findings[:1])
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	_, verdicts, _ := strings.Cut(text.String(), "\nverdicts\n")
	for _, s := range []string{
		"  [high] out of memory: python3 (pid 4200): cudaMalloc of 200.0 GiB failed (out of memory) at +1.999 s, 2 attempts, at train.py:60 <module>;",
		"      where: train.py:60 <module>\n      python3 (tid 4200) asked cudaMalloc of 200.0 GiB on CUDA device 0 at +1.999 s\n",
		"        30.0 GiB in 30 × cudaMalloc [PyTorch caching allocator] at train.py:42 hold_c\n",
		"      GPU 0 (the NVML sample nearest, 40.0 ms before the failure): 143.0 GiB total, 134.0 GiB used, 9.0 GiB free; this process 104.0 GiB; other processes: serve (pid 999, container c0ffee00c0ff) 30.0 GiB\n",
		"      recovered: an allocation succeeded 2.0 ms later\n      fix: make room before this allocation",
	} {
		if !strings.Contains(verdicts, s) {
			t.Errorf("terminal report lacks %q:\n%s", s, text.String())
		}
	}
	if i := strings.Index(verdicts, "[high] out of memory"); i != strings.Index(verdicts, "[") {
		t.Errorf("the out-of-memory verdict is not first:\n%s", verdicts)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page, ""); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	_, findings, _ := strings.Cut(html, `<ul class="findings">`)
	for _, s := range []string{
		`<li class="high"><span class="sev">high</span><span class="title">out of memory: python3 (pid 4200): cudaMalloc of 200.0 GiB failed`,
		`<div class="where">where: <code>train.py:60 &lt;module&gt;</code></div>`,
		"<pre class=\"lines\">python3 (tid 4200) asked cudaMalloc of 200.0 GiB on CUDA device 0 at &#43;1.999 s\n",
		"  2.0 GiB in 1 × cudaMalloc [NCCL] at train.py:20 &lt;module&gt;\n",
	} {
		if !strings.Contains(findings, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	if !strings.HasPrefix(strings.TrimSpace(findings), `<li class="high"><span class="sev">high</span><span class="title">out of memory`) {
		t.Errorf("the page's first verdict is not the out-of-memory one:\n%.600s", findings)
	}
}
