package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer"
)

// statusLine is a one-line live status on a terminal, and nothing otherwise.
// It is redrawn at most every statusEvery, and only when its text changed.
type statusLine struct {
	w     io.Writer
	tty   bool
	now   func() time.Time
	shown bool
	text  string    // what is shown
	drawn time.Time // when it was drawn
}

// statusEvery is the shortest time between two redraws: a pass over a
// recording reports every 64 KiB, which redrew the line 6,480 times in 5 s.
const statusEvery = 250 * time.Millisecond

func newStatusLine(w io.Writer) *statusLine {
	f, ok := w.(*os.File)
	return &statusLine{w: w, tty: ok && term.IsTerminal(int(f.Fd())), now: time.Now}
}

func (s *statusLine) update(st tracer.Status) {
	s.printf("cudatap: %s · %d process(es) · %s events/s · %d events · %d lost · %s written",
		st.Elapsed.Truncate(1e9), st.Processes, humanCount(st.EventsPerSec), st.Events, st.Lost, units.Bytes(uint64(max(st.Bytes, 0))))
}

func (s *statusLine) printf(format string, args ...any) {
	if !s.tty {
		return
	}
	now := s.now()
	if s.shown && now.Sub(s.drawn) < statusEvery {
		return
	}
	text := fmt.Sprintf(format, args...)
	if s.shown && text == s.text {
		return
	}
	fmt.Fprint(s.w, "\r\033[K"+text)
	s.shown, s.text, s.drawn = true, text, now
}

func (s *statusLine) clear() {
	if s.shown {
		fmt.Fprint(s.w, "\r\033[K")
		s.shown = false
	}
}

func humanCount(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

// printAttached is the session's Observer.Attached of the tracing
// commands: one line on w once probes are live in every target.
func printAttached(w io.Writer) func(n int) {
	return func(n int) { fmt.Fprintf(w, "attached to %d process(es)\n", n) }
}

// printFollowing is OnAttached for a session that follows process trees.
func printFollowing(w io.Writer) func(n int) {
	return func(n int) {
		fmt.Fprintf(w, "attached to %d process(es), and to every process they start (--no-follow: the command alone)\n", n)
	}
}
