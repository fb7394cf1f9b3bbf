package report

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/model"
)

// summary collects the fixture's sync sites and writes its summary.
func summary(t *testing.T, f *fixture.Fixture, opts Options) string {
	t.Helper()
	sites := syncs.NewCollector()
	f.Feed(sites)
	var buf bytes.Buffer
	if err := Summary(&buf, f.Result, sites, opts); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// row returns the fields of the first line that starts with label, split
// on the column padding.
func row(t *testing.T, out, label string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), label) {
			return regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		}
	}
	t.Fatalf("no row %q in\n%s", label, out)
	return nil
}

func TestSummary(t *testing.T) {
	out := summary(t, fixture.New(), Options{})

	const drops = "dropped events: 0 (ring buffer full 0, entry table full 0, decode errors 0); returns without their entry: 0; argument read faults: 0; attach failures: 0"
	if !strings.HasSuffix(out, "\n"+drops+"\n") {
		t.Errorf("drops line missing at the end:\n%s", out)
	}
	for _, want := range []string{
		"cudatap summary: 2 processes, 50.0 ms recorded",
		"python3 (pid 4123, container abc123def456)\n  15 calls over 11.5 ms, 8 GPU ops (inferred), device memory peak 3.0 MiB",
		"a.out (pid 5000)\n  3 calls over 705.0 µs, 2 GPU ops (inferred), device memory peak 64.0 MiB",
		"  NCCL: 1 operations, 1.0 MiB; communication 400.0 µs, 75% of it overlapped compute on other streams (inferred)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}

	// Streams in id order, before the device-wide and total rows.
	last := -1
	for _, label := range []string{"stream 0 (legacy default)", "stream 1 (per-thread default, tid 4130)",
		"stream 2 (non-blocking, prio -1)", "stream 3 (pre-existing)", "device-wide", "total", "a.out (pid 5000)"} {
		i := strings.Index(out, label)
		if i <= last {
			t.Errorf("%q out of order", label)
		}
		last = i
	}

	header := row(t, out, "STREAM")
	for label, want := range map[string][]string{
		//                                  LAUNCHES COPIES HtoD DtoH DtoD PAGEABLE PINNED MEMSETS EXPLICIT IMPLICIT GPU OPS, GPU BUSY (an upper bound, of the 11.5 ms traced)
		"stream 0 (legacy default)":        {"0", "1", "0 B", "0 B", "512 B", "0 B", "0 B", "0", "-", "1 / 2.9 ms", "1", "≤ 0 ns (0%)"},
		"stream 2 (non-blocking, prio -1)": {"2", "2", "1.0 MiB", "4.0 KiB", "0 B", "4.0 KiB", "1.0 MiB", "0", "2 / 2.8 ms", "1 / 30.0 µs", "4", "≤ 5.8 ms (50%)"},
		"stream 3 (pre-existing)":          {"1", "0", "0 B", "0 B", "0 B", "0 B", "0 B", "1", "-", "-", "2", "≤ 20.0 ms (100%)"},
		"device-wide":                      {"-", "-", "-", "-", "-", "-", "-", "-", "1 / 4.8 ms", "-", "-", "-"},
		"total":                            {"4", "3", "1.0 MiB", "4.0 KiB", "512 B", "4.0 KiB", "1.0 MiB", "1", "3 / 7.6 ms", "2 / 2.9 ms", "8", "-"},
	} {
		got := row(t, out, label)
		if len(got) != len(header) || strings.Join(got[1:], "|") != strings.Join(want, "|") {
			t.Errorf("row %q = %q, want %q (columns %q)", label, got[1:], want, header)
		}
	}

	// Sync sites: heaviest first; the site is the user's code, not the
	// CUDA function the probe stopped in nor PyTorch's native code that
	// called it; the hint comes along.
	sites := out[strings.Index(out, "top sync sites"):]
	var order []int
	for _, k := range []string{"device_sync", "sync_memcpy", "stream_sync", "event_sync", "pageable_memcpy"} {
		order = append(order, strings.Index(sites, "\n  "+k+" "))
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] < 0 || order[i] <= order[i-1] {
			t.Errorf("sync sites out of order: %v\n%s", order, sites)
		}
	}
	want := []string{"stream_sync", "1", "1.9 ms", "cudaStreamSynchronize", "train_step (train.py)", model.SyncStream.Hint()}
	if got := row(t, sites, "stream_sync"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("stream sync site %q, want %q", got, want)
	}
	if got := row(t, sites, "pageable_memcpy"); got[4] != "train_step (train.py)" {
		t.Errorf("pageable copy site %q", got)
	}
	if got := row(t, sites, "event_sync"); got[4] != "train.py:88 step" { // the Python line wins
		t.Errorf("event sync site %q", got)
	}
	if got := row(t, sites, "sync_memcpy"); got[4] != "-" {
		t.Errorf("site without a stack %q", got)
	}
}

func TestGrouping(t *testing.T) {
	f := fixture.New()
	a := f.Traces[fixture.PIDA]
	// A second stream sync from the same place, later, joins the first
	// site.
	s := a.Syncs[1]
	s.Start, s.BlockedNs = fixture.Base+11_300_000, 100_000
	a.Syncs = append(a.Syncs, s)

	out := summary(t, f, Options{TopSites: 3})
	sites := out[strings.Index(out, "top sync sites"):strings.Index(out, "a.out")]
	if got := row(t, sites, "stream_sync"); got[1] != "2" || got[2] != "2.0 ms" {
		t.Errorf("grouped site %q", got)
	}
	if strings.Contains(sites, "event_sync") || strings.Count(sites, "\n  ") != 4 { // header + 3 sites
		t.Errorf("TopSites 3 not honoured:\n%s", sites)
	}
}

func TestDropsLine(t *testing.T) {
	f := fixture.New()
	f.Result.Drops = model.Drops{RingbufFull: 3, InflightFull: 1, OrphanReturns: 2, DecodeErrors: 4, UnknownAPI: 5, ReadFaults: 6, AttachFailures: 7}
	out := summary(t, f, Options{})
	const want = "dropped events: 13 (ring buffer full 3, entry table full 1, decode errors 4, unknown API 5); returns without their entry: 2; argument read faults: 6; attach failures: 7"
	if !strings.Contains(out, want) {
		t.Errorf("drops line missing %q in\n%s", want, out)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestWriteError(t *testing.T) {
	if err := Summary(failWriter{}, fixture.New().Result, nil, Options{}); err == nil {
		t.Error("write error not returned")
	}
}

// TestSummaryOOM: a failed allocation is the summary's first verdict, its
// details are in its process's section, and NVML's "none" no longer claims
// there was no out-of-memory.
func TestSummaryOOM(t *testing.T) {
	sites := syncs.NewCollector()
	r := fixture.OOM(sites, false)
	var buf bytes.Buffer
	if err := Summary(&buf, r, sites, Options{}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[1], "verdict: out of memory: python3 (pid 4200): cudaMalloc of 200.0 GiB failed (out of memory) at +1.999 s, 2 attempts, at train.py:60 <module>; it held 102.0 GiB") ||
		!strings.HasSuffix(lines[1], "; no allocation succeeded after it; it made 1 more CUDA call after it, the last 960.0 µs later") {
		t.Errorf("first verdict:\n%s", out)
	}
	for _, s := range []string{
		"\n  out of memory:\n    python3 (tid 4200) asked cudaMalloc of 200.0 GiB on CUDA device 0 at +1.999 s\n    at train.py:60 <module>\n",
		"\n      40.0 GiB in 1 × cudaMalloc [PyTorch caching allocator] at train.py:30 hold_a\n",
		"\n    GPU 0 (the NVML sample nearest, 40.0 ms before the failure): 143.0 GiB total",
		"\n  verdicts: none from NVML (no out-of-memory risk seen in its samples, no throttling, no idle holder); an allocation failed for want of memory: see the out-of-memory verdicts at the top\n",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("summary lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "verdicts: none (") {
		t.Errorf("the summary says there was no out-of-memory:\n%s", out)
	}
}
