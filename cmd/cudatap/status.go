package main

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/term"

	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer"
)

// statusLine is a one-line live status on a terminal, and nothing otherwise.
type statusLine struct {
	w     io.Writer
	shown bool
	tty   bool
}

func newStatusLine(w io.Writer) *statusLine {
	f, ok := w.(*os.File)
	return &statusLine{w: w, tty: ok && term.IsTerminal(int(f.Fd()))}
}

func (s *statusLine) update(st tracer.Status) {
	if !s.tty {
		return
	}
	fmt.Fprintf(s.w, "\r\033[Kcudatap: %s · %d process(es) · %s events/s · %d events · %d lost · %s written",
		st.Elapsed.Truncate(1e9), st.Processes, humanCount(st.EventsPerSec), st.Events, st.Lost, units.Bytes(uint64(max(st.Bytes, 0))))
	s.shown = true
}

func (s *statusLine) printf(format string, args ...any) {
	if !s.tty {
		return
	}
	fmt.Fprintf(s.w, "\r\033[K"+format, args...)
	s.shown = true
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

// printAttached is the session's OnAttached callback of the tracing
// commands: one line on w once probes are live in every target.
func printAttached(w io.Writer) func(n int) {
	return func(n int) { fmt.Fprintf(w, "attached to %d process(es)\n", n) }
}

// printFollowing is OnAttached for a session that follows process trees.
func printFollowing(w io.Writer) func(n int) {
	return func(n int) {
		fmt.Fprintf(w, "following %d process(es) and every process they start (--no-follow: the command alone)\n", n)
	}
}
