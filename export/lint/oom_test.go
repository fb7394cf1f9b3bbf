package lint

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
)

// TestOOMFinding: a failed allocation is an error, first: its request an
// example with the failed call and who held the memory, in the text and
// the JSON; without a collector it is still found.
func TestOOMFinding(t *testing.T) {
	c := NewCollector(DefaultOptions())
	r := fixture.OOM(c, false)
	fs := Findings(r, c)
	if len(fs) == 0 || fs[0].ID != OutOfMemory || fs[0].Level != LevelError || fs[0].Cost.Kind != CostFailure || fs[0].Count != 1 ||
		fs[0].Sites != 1 || fs[0].PID != fixture.OOMPID || len(fs[0].Examples) != 1 {
		t.Fatalf("findings: %+v", fs)
	}
	ex := fs[0].Examples[0]
	e := ex.Calls[0]
	if ex.Count != 2 || e.Role != "alloc" || e.Call != "cudaMalloc" || e.Site != fixture.OOMLine || !e.UserFrame || e.Bytes != fixture.OOMAsked ||
		e.Thread != "python3" || e.AtNs != fixture.OOMAt-r.Start || e.Seq == 0 {
		t.Errorf("example: %+v", ex)
	}
	for _, s := range []string{"200.0 GiB asked, 102.0 GiB held: 40.0 GiB at train.py:30 hold_a [PyTorch caching allocator]", "2 more",
		"GPU 0 9.0 GiB free of 143.0 GiB (NVML)", "; no allocation succeeded after it (1 more CUDA call)"} {
		if !strings.Contains(ex.Note, s) {
			t.Errorf("note lacks %q: %s", s, ex.Note)
		}
	}
	var txt bytes.Buffer
	if err := WriteText(&txt, r, c, fs, TextOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"cudatap lint: 1 finding: 1 error (checked: out-of-memory, legacy-nonblocking-copy",
		"  error: [out-of-memory] out of memory: a device allocation failed\n    python3 (pid 4200): 1 device allocation failed for want of memory; the first: cudaMalloc of 200.0 GiB at +1.999 s, holding 102.0 GiB through CUDA; no allocation succeeded after it (1 more CUDA call)\n    cost: not priced in time: a device allocation failed\n",
		"    alloc  cudaMalloc  +1.999 s  python3 (tid 4200)  no stream  at train.py:60 <module>",
		"  fix: make room before this allocation"} {
		if !strings.Contains(txt.String(), s) {
			t.Errorf("text lacks %q:\n%s", s, txt.String())
		}
	}
	if again := Findings(r, nil); len(again) != 1 || again[0].ID != OutOfMemory {
		t.Errorf("without a collector: %+v", again)
	}
}
