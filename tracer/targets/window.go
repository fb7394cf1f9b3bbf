package targets

import (
	"time"

	"golang.org/x/sys/unix"
)

// namingQuiet is how long the naming window stays open after the last
// kernel it named for the first time. A training loop launches all its
// kernels every step, so once a step has gone by without a new name,
// every kernel of the loop is named and the second trap per launch only
// costs. Rare kernels (evaluation every N steps) may stay unnamed: their
// launches are still counted and shown as kernel@0x….
const namingQuiet = 500 * time.Millisecond

// namingQuietLaunches is how many launches must go by without a new name
// (about ten steps of a small training loop).
const namingQuietLaunches = 256

// Stubs says when kernels were last named for the first time through
// runtime launch stubs (the model's LastNewStub).
type Stubs interface {
	// LastNewStub is when a launch of pid last named a kernel that had no
	// name before (trace clock), 0 if never, and how many launches pid
	// made since.
	LastNewStub(pid uint32) (at uint64, launchesSince int)
}

// EndNamingWindows closes runtime launch probes whose naming window is
// over: at its deadline, or once it has named nothing new for namingQuiet
// after naming something (stubs says).
func (s *Set) EndNamingWindows(now time.Time, stubs Stubs) {
	s.releasePairings()
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	mono := uint64(ts.Nano())
	s.mu.Lock()
	var open []*target
	for _, t := range s.targets {
		if t.rtLaunch != nil && !t.rtLaunchUntil.IsZero() {
			open = append(open, t)
		}
	}
	s.mu.Unlock()
	for _, t := range open {
		last, since := stubs.LastNewStub(uint32(t.pid))
		// Quiet: it named something, and since then the process launched
		// namingQuietLaunches kernels over namingQuiet with no new name. A
		// process that pauses (waiting for data, a profiler starting up)
		// proves nothing by launching nothing, and closing then left every
		// kernel it loaded earlier unnamed (H200: 12 of 12).
		quiet := last >= t.rtLaunchFromMono && mono-last > uint64(namingQuiet) && since >= namingQuietLaunches
		if now.After(t.rtLaunchUntil) || quiet {
			s.mu.Lock()
			if t.rtLaunch != nil {
				t.closeRuntimeLaunches(s.tr)
				s.log.Debug("naming window closed", "pid", t.pid, "early", quiet && !now.After(t.rtLaunchUntil))
			}
			s.mu.Unlock()
		}
	}
}
