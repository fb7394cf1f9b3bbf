package chrome

import (
	"math"
	"testing"
)

// TestMark: a GPU op CUPTI did not time is drawn as a 1 µs mark inside its
// bounds, which HTA's rounding (start up, end down to whole microseconds)
// reads as 0 µs, never negative: at the model's layout when it fits, after
// the track's last mark, and within the bounds whatever they are.
func TestMark(t *testing.T) {
	for _, tc := range []struct {
		name                string
		lo, hi, want, after uint64
		ts, dur             uint64
	}{
		{"at the layout", 10_000, 50_000, 20_300, 0, 20_500, 1000},
		{"after the last mark", 10_000, 50_000, 20_300, 21_200, 21_500, 1000},
		{"not before the bounds", 10_700, 50_000, 0, 0, 11_500, 1000},
		{"not after the bounds", 10_000, 30_200, 40_000, 0, 28_500, 1000},
		{"a dense track: inside the bounds first", 10_000, 30_200, 0, 35_000, 28_500, 1000},
		{"bounds that hold no mark", 10_700, 12_100, 11_000, 0, 10_700, 1400},
		{"bounds of no length", 10_700, 10_700, 10_700, 0, 10_700, minDur},
		{"small times", 0, 1500, 0, 0, 500, 1000},
	} {
		ts, dur := mark(tc.lo, tc.hi, tc.want, tc.after)
		if ts != tc.ts || dur != tc.dur {
			t.Errorf("%s: [%d +%d], want [%d +%d]", tc.name, ts, dur, tc.ts, tc.dur)
		}
		if ts < tc.lo || (ts+dur > tc.hi && tc.hi > tc.lo) {
			t.Errorf("%s: [%d, %d] outside the bounds [%d, %d]", tc.name, ts, ts+dur, tc.lo, tc.hi)
		}
		if dur == markNs {
			start, end := float64(ts)/1000, float64(ts+dur)/1000
			if got := math.Floor(end) - math.Ceil(start); got != 0 {
				t.Errorf("%s: HTA reads %v µs, want 0 (unknown)", tc.name, got)
			}
		}
	}
}
