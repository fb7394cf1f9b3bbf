package main

import (
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/export/straggler"
)

// hangAfter is how long ranks must wait in a collective for the others
// before record names the ones that stopped arriving (a collective takes
// milliseconds; a data-loading stall can take seconds).
const hangAfter = 5 * time.Second

// hangWatch names NCCL ranks that stopped arriving while the others wait
// (once a second, from record's status callback): one line on stderr when
// a stall begins, terminal or not, and one when it ends.
type hangWatch struct {
	progress *straggler.Progress
	w        io.Writer
	status   *statusLine
	shown    map[[2]uint64]bool // communicator, collective
}

func (h *hangWatch) check() {
	now := monotonicNow()
	current := map[[2]uint64]bool{}
	for _, s := range h.progress.Stalls(now, hangAfter) {
		k := [2]uint64{s.Comm, uint64(s.Seq)}
		current[k] = true
		if !h.shown[k] {
			h.status.clear()
			fmt.Fprintf(h.w, "cudatap: NCCL hang? %s\n", s.String(now))
		}
	}
	for k := range h.shown {
		if !current[k] {
			h.status.clear()
			fmt.Fprintf(h.w, "cudatap: NCCL communicator %016x: collective #%d is no longer waited for\n", k[0], k[1]+1)
		}
	}
	h.shown = current
}

// reportStalls writes the stalls that last (when) into a summary.
func reportStalls(w io.Writer, p *straggler.Progress, when string) {
	now := monotonicNow()
	for _, s := range p.Stalls(now, hangAfter) {
		fmt.Fprintf(w, "NCCL, %s: %s\n", when, s.String(now))
	}
}

// monotonicNow is CLOCK_MONOTONIC in ns, the clock events carry.
func monotonicNow() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
