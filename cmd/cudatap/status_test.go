package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeStatus is a status line on a pretend terminal whose clock moves only
// when the test says.
func fakeStatus() (*statusLine, *strings.Builder, *time.Time) {
	var out strings.Builder
	clock := time.Unix(1_700_000_000, 0)
	return &statusLine{w: &out, tty: true, now: func() time.Time { return clock }}, &out, &clock
}

func redraws(out *strings.Builder) int { return strings.Count(out.String(), "\r\033[K") }

// TestProgressRedrawsRateLimited: a pass over a 400 MiB recording reports
// every 64 KiB (6,400 reports) over 5 s; the line is redrawn 4 times a
// second, the last text shown being the latest report at its redraw.
func TestProgressRedrawsRateLimited(t *testing.T) {
	const size, chunk = 400 << 20, 64 << 10
	f, err := os.Create(filepath.Join(t.TempDir(), "big.cudatap"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	status, out, clock := fakeStatus()
	report := progress(status, "reading big.cudatap", f)
	reports := size / chunk
	step := 5 * time.Second / time.Duration(reports)
	for done := int64(chunk); done <= size; done += chunk {
		report(done)
		*clock = clock.Add(step)
	}
	// Redraws at 0, 250 ms, ..., 4.75 s.
	if n, want := redraws(out), int(5*time.Second/statusEvery); n != want {
		t.Errorf("%d reports over 5 s redrew the line %d times, want %d", reports, n, want)
	}
	if last := out.String()[strings.LastIndex(out.String(), "\r\033[K"):]; !strings.Contains(last, "reading big.cudatap: 95% (380.1 MiB of 400.0 MiB)") {
		t.Errorf("last redraw %q, want the report made at 4.75 s (95%%)", last)
	}
}

// TestStatusRedrawsOnlyChanges: the same text is not drawn again, however
// late; a new one is, and after clear() the next is drawn at once.
func TestStatusRedrawsOnlyChanges(t *testing.T) {
	status, out, clock := fakeStatus()
	for range 10 {
		status.printf("cudatap: report: %s %d%%", "pass 1", 50)
		*clock = clock.Add(time.Second)
	}
	if n := redraws(out); n != 1 {
		t.Errorf("the same text, 10 times a second apart: %d redraws, want 1", n)
	}
	status.printf("cudatap: report: %s %d%%", "pass 1", 51)
	status.clear()
	status.printf("cudatap: report: %s %d%%", "pass 2", 0) // at once: nothing is shown
	if n := redraws(out); n != 4 {                         // 51%, the clear, pass 2
		t.Errorf("%d redraws and clears, want 4:\n%q", n, out.String())
	}
}

// TestStatusNotATerminal: nothing at all when stderr is no terminal.
func TestStatusNotATerminal(t *testing.T) {
	var out strings.Builder
	status := newStatusLine(&out)
	status.printf("cudatap: %d%%", 1)
	status.clear()
	if out.Len() != 0 {
		t.Errorf("wrote %q to a writer that is not a terminal", out.String())
	}
}
