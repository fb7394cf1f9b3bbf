package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/testutil"
)

// summaryStragglers is what TestMergeOneHost reads of `export --json`.
type summaryStragglers struct {
	Processes []struct {
		PID     uint32 `json:"pid"`
		FirstNs uint64 `json:"first_ns"`
		LastNs  uint64 `json:"last_ns"`
	} `json:"processes"`
	Stragglers []commJSON `json:"stragglers"`
}

type commJSON struct {
	CommID    string `json:"comm_id"`
	Meetings  int    `json:"meetings"`
	Straggler int    `json:"straggler"`
	RankStats []struct {
		PID        uint32 `json:"pid"`
		Rank       int    `json:"rank"`
		WaitedNs   uint64 `json:"waited_ns"`
		CausedNs   uint64 `json:"caused_ns"`
		RecordedNs uint64 `json:"recorded_ns"`
	} `json:"rank_stats"`
}

// TestMergeOneHost (issue 26): two ranks of a simulated NCCL job recorded
// apart on this host (one boot, one clock), rank 1 sleeping 30 ms before
// each of its all-reduces, which are asynchronous: rank 0 makes all of
// its own at once and blocks once, in its closing synchronization, until
// rank 1 is done. In each of 20 runs merge leaves both recordings
// unshifted and names rank 1 the straggler; the waits it reports are
// what rank 0 blocked (no more than it was recorded, where adding up the
// arrival spreads gave several times that), and rank 1 caused them.
func TestMergeOneHost(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	// The straggler is the rank last most often: rank 1's iters late
	// all-reduces must outvote the 4 closing collectives, where either rank
	// may come last (with 3, rank 0 was last in 4 of 7 once, descheduled
	// while two make test ran at once).
	const runs, iters, parallel = 20, 8, 4
	const late = 30 * time.Millisecond
	dir := t.TempDir()
	type recorded struct {
		paths   []string
		pids    [2]uint32
		comm    string
		blocked int64 // rank 0's time blocked on rank 1, as the sim measured it
	}
	recs := make([]recorded, runs)
	// Recorded two at a time (-parallel): the runs are ~0.1 s of work
	// each, and attaching and detaching take longer.
	t.Run("record", func(t *testing.T) {
		for i := range runs {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				paths, ranks := recordSimJob(t, b, dir, fmt.Sprintf("run%d", i), 100+i, iters, late)
				_, id := simJob(100 + i)
				recs[i] = recorded{paths: paths, pids: [2]uint32{uint32(ranks[0].pid()), uint32(ranks[1].pid())}, comm: fmt.Sprintf("%016x", id),
					blocked: ranks[0].report(t).MeetingWaitNs}
			})
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	var waited, simBlocked time.Duration
	for i, r := range recs {
		out := filepath.Join(dir, fmt.Sprintf("run%d.json", i))
		merged := filepath.Join(dir, fmt.Sprintf("run%d.cudatap", i))
		_, stderr, err := run(t, "merge", r.paths[0], r.paths[1], "-o", out, "-o", merged)
		if err != nil {
			t.Fatalf("run %d: merge: %v\n%s", i, err, stderr)
		}
		if want := "rank 1): not shifted: recorded in the same boot of the same host as " + r.paths[0]; !strings.Contains(stderr, want) {
			t.Errorf("run %d: merge says no %q:\n%s", i, want, stderr)
		}
		m, _ := readChrome(t, out).Cudatap["merge"].(map[string]any)
		ins, _ := m["inputs"].([]any)
		if len(ins) != 2 {
			t.Fatalf("run %d: merge info %v", i, m)
		}
		in0, in1 := ins[0].(map[string]any), ins[1].(map[string]any)
		if in1["offset_ns"] != in0["offset_ns"] || in1["uncertainty_ns"] != 0.0 || in1["method"] != "same_boot" {
			t.Errorf("run %d: rank 1 shifted: %v, rank 0: %v", i, in1, in0)
		}

		stdout, stderr, err := run(t, "export", "--json", merged)
		if err != nil {
			t.Fatalf("run %d: export: %v\n%s", i, err, stderr)
		}
		var sum summaryStragglers
		if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, stdout)
		}
		recorded := map[uint32]uint64{}
		for _, p := range sum.Processes {
			recorded[p.PID] = p.LastNs - p.FirstNs
		}
		var c *commJSON
		for j := range sum.Stragglers {
			if sum.Stragglers[j].CommID == r.comm {
				c = &sum.Stragglers[j]
			}
		}
		// The all-reduces and the closing group's all-gather, reduce-scatter,
		// broadcast and reduce.
		if c == nil || c.Meetings != iters+4 || len(c.RankStats) != 2 {
			t.Fatalf("run %d: stragglers %+v, want communicator %s with %d meetings", i, sum.Stragglers, r.comm, iters+4)
		}
		if c.Straggler != 1 {
			t.Errorf("run %d: straggler rank %d, want rank 1 (pid %d): %+v", i, c.Straggler, r.pids[1], c.RankStats)
		}
		for _, s := range c.RankStats {
			if s.WaitedNs > s.RecordedNs || s.RecordedNs > recorded[s.PID] || s.PID != r.pids[s.Rank] {
				t.Errorf("run %d: rank %d (pid %d) waited %v of %v recorded (its process: %v)", i, s.Rank, s.PID,
					time.Duration(s.WaitedNs), time.Duration(s.RecordedNs), time.Duration(recorded[s.PID]))
			}
		}
		if r0, r1 := c.RankStats[0], c.RankStats[1]; r1.CausedNs != r0.WaitedNs {
			t.Errorf("run %d: rank 1 caused %v, rank 0 waited %v", i, time.Duration(r1.CausedNs), time.Duration(r0.WaitedNs))
		}
		waited += time.Duration(c.RankStats[0].WaitedNs)
		simBlocked += time.Duration(r.blocked)
	}
	// Somewhere in 20 runs rank 0 blocked on rank 1, and it was counted.
	if waited == 0 {
		t.Errorf("no wait counted in %d runs; the sim's rank 0 blocked %v on rank 1 in all", runs, simBlocked)
	}
	t.Logf("rank 0 waited %v in all (%.1f ms a run), as the sim measured it %v", waited, float64(waited.Milliseconds())/runs, simBlocked)
}
