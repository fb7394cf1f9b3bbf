package straggler

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

func commInit(c *Collector, pid uint32, handle, id uint64, rank, nranks int) {
	c.Call(&model.Process{PID: pid}, &model.Call{API: event.NcclCommInitRank, HasRet: true,
		Args: event.Args{Comm: handle, CommID: id, Peer: int32(rank), Size: uint64(nranks)}})
}

func allReduce(c *Collector, pid uint32, handle, at uint64) {
	c.Call(&model.Process{PID: pid}, &model.Call{API: event.NcclAllReduce, Start: at, Args: event.Args{Comm: handle}})
}

// TestStraggler: three ranks meet at 50 all-reduces; rank 2 is 3 ms late
// at each but one, where rank 0 is later still; another job's
// communicator (another id) is kept apart; comm handles are per process.
func TestStraggler(t *testing.T) {
	c := NewCollector()
	const ms = 1_000_000
	for r := range 3 {
		commInit(c, uint32(100+r), 0xc0+uint64(r), 0xfeed, r, 3)
	}
	commInit(c, 200, 0xc0, 0xbeef, 0, 2) // another job: pid 200 and 201
	commInit(c, 201, 0xc0, 0xbeef, 1, 2)
	for k := range uint64(50) {
		base := k * 100 * ms
		if k == 7 {
			allReduce(c, 100, 0xc0, base+10*ms) // rank 0 late, once
		} else {
			allReduce(c, 100, 0xc0, base)
		}
		allReduce(c, 101, 0xc1, base+1*ms)
		allReduce(c, 102, 0xc2, base+4*ms) // rank 2: 3 ms behind rank 1
		allReduce(c, 200, 0xc0, base)
		allReduce(c, 201, 0xc0, base+1*ms)
	}
	comms := c.Comms()
	if len(comms) != 2 {
		t.Fatalf("%d communicators, want 2", len(comms))
	}
	var job *Comm
	for i := range comms {
		if comms[i].ID == 0xfeed {
			job = &comms[i]
		}
	}
	if job == nil || job.Ranks != 3 || job.Straggler() != 2 {
		t.Fatalf("communicator 0xfeed: %+v", job)
	}
	if st := job.Stats[2]; st.Last != 49 || st.PID != 102 || st.LateNs != 49*4*ms {
		t.Errorf("rank 2: %+v, want last at 49 meetings, 4 ms behind the first each", st)
	}
	if st := job.Stats[0]; st.Last != 1 || st.LateNs != 9*ms {
		t.Errorf("rank 0: %+v, want last once, 9 ms behind rank 1", st)
	}
	// Nobody blocked: arriving early at an asynchronous collective is no
	// wait.
	if job.WaitedNs() != 0 || job.Stats[2].CausedNs != 0 {
		t.Errorf("waits counted without any blocking call: %+v", job.Stats)
	}
	var out strings.Builder
	c.Report(&out)
	if !strings.Contains(out.String(), "straggler: rank 2 (pid 102)") {
		t.Errorf("report:\n%s", out.String())
	}
}

// rankCall is a collective of rank pid with the given Python stack,
// enqueuing GPU op id.
func rankCall(c model.Sink, p *model.Process, api event.API, at uint64, op int, py int32) {
	c.Call(p, &model.Call{API: api, Start: at, End: at + 1000, TID: p.PID, GPUOp: op, PyStack: py, Stack: -1,
		Args: event.Args{Comm: 0xc0}})
}

// TestStragglerSites: rank 1 loads data (a copy, then 20 ms of host work)
// before each all-reduce; the others wait for it. The report names rank 1
// with the user's Python line of its copy and of its all-reduce (not the
// library frames inside them), the gap, and each rank's share of waiting.
func TestStragglerSites(t *testing.T) {
	const ms = 1_000_000
	c := NewCollector()
	names := model.NewNames()
	var procs []*model.Process
	for r := range 2 {
		pid := uint32(100 + r)
		p := &model.Process{PID: pid, PyStacks: [][]model.PyKey{{{Code: 1}, {Code: 2}}, {{Code: 3}}}}
		names.Py[model.PyNameKey{PID: pid, PyKey: model.PyKey{Code: 1}}] = "/venv/lib/python3.12/site-packages/torch/distributed/c10d.py:10 all_reduce"
		names.Py[model.PyNameKey{PID: pid, PyKey: model.PyKey{Code: 2}}] = "train.py:57 step"
		names.Py[model.PyNameKey{PID: pid, PyKey: model.PyKey{Code: 3}}] = "train.py:42 load_batch"
		procs = append(procs, p)
		commInit(c, pid, 0xc0, 0x5eed, r, 2)
	}
	op := 0
	for k := range uint64(10) {
		base := k * 100 * ms
		rankCall(c, procs[0], event.NcclAllReduce, base, op, 0)
		c.Call(procs[1], &model.Call{API: event.CudaMemcpyAsync, Start: base, End: base + ms, TID: 101, GPUOp: -1, PyStack: 1, Stack: -1})
		rankCall(c, procs[1], event.NcclAllReduce, base+21*ms, op, 0)
		// Both learn it complete 1 ms after rank 1 arrived.
		for _, p := range procs {
			c.GPUOp(p, &model.GPUOp{ID: op, Kind: model.OpCollective, Bounded: true})
		}
		op++
	}
	// ProvenBy is the model's: not settable here, so the ops above carry
	// none and collective time stays unknown; the ranks' waits do not.
	comms := c.Comms()
	if len(comms) != 1 || comms[0].Straggler() != 1 || comms[0].Meetings != 10 {
		t.Fatalf("comms %+v", comms)
	}
	cm := comms[0]
	if st := cm.Stats[1]; st.LateNs != 10*21*ms || st.CausedNs != 0 || cm.WaitedNs() != 0 {
		t.Errorf("rank 1: %+v, want 21 ms late at each of 10 meetings, nobody blocked", st)
	}
	if len(cm.Worst) != worstKept || cm.Worst[0].LastRank != 1 || cm.Worst[0].Spread != 21*ms {
		t.Errorf("worst %+v", cm.Worst)
	}
	res := &model.Result{Processes: procs, Names: names}
	sites := c.Sites(res)
	if len(sites) != 1 {
		t.Fatalf("sites %+v", sites)
	}
	s := sites[0]
	if s.Rank != 1 || s.PID != 101 || s.Meetings != 10 || s.Before != "cudaMemcpyAsync" || s.BeforeLine != "train.py:42 load_batch" ||
		s.At != "ncclAllReduce" || s.AtLine != "train.py:57 step" || s.GapNs != 20*ms {
		t.Errorf("site %+v", s)
	}
	var out strings.Builder
	c.ReportNamed(&out, Naming{Result: res, Origins: map[uint32]string{101: "pid 4124 on nodeB"}})
	for _, want := range []string{"straggler: rank 1 (pid 4124 on nodeB)", "#1 rank 1 (pid 4124 on nodeB)",
		"before: cudaMemcpyAsync at train.py:42 load_batch, then 20.0 ms", "at:     ncclAllReduce at train.py:57 step", "210.0 ms behind the first arrival"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSendRecvNotMeetings: point-to-point calls on a communicator do not
// shift the numbering of its collectives.
func TestSendRecvNotMeetings(t *testing.T) {
	c := NewCollector()
	commInit(c, 1, 0xc0, 0xab, 0, 2)
	commInit(c, 2, 0xc0, 0xab, 1, 2)
	c.Call(&model.Process{PID: 1}, &model.Call{API: event.NcclSend, Start: 5, Args: event.Args{Comm: 0xc0}})
	allReduce(c, 1, 0xc0, 10)
	allReduce(c, 2, 0xc0, 30)
	if cs := c.Comms(); len(cs) != 1 || cs[0].Meetings != 1 || cs[0].Straggler() != 1 || cs[0].Pending != 0 {
		t.Errorf("comms %+v", cs)
	}
}

// TestSeries keeps the first and last meetings of each rank, with their
// completions and measured ends.
func TestSeries(t *testing.T) {
	s := NewSeries(3)
	p := &model.Process{PID: 7}
	s.Call(p, &model.Call{API: event.NcclCommInitRank, HasRet: true, Args: event.Args{Comm: 0xc0, CommID: 0xfeed, Peer: 1, Size: 4}})
	for k := range 10 {
		s.Call(p, &model.Call{API: event.NcclAllReduce, Start: uint64(1000 * (k + 1)), GPUOp: k, Args: event.Args{Comm: 0xc0}})
		if k == 8 {
			continue // never proven complete
		}
		s.GPUOp(p, &model.GPUOp{ID: k, Kind: model.OpCollective, Measured: k == 9, End: 5})
	}
	rs := s.Ranks()
	if len(rs) != 1 || rs[0].Comm != 0xfeed || rs[0].Rank != 1 || rs[0].Ranks != 4 || rs[0].Calls != 10 || rs[0].PID != 7 {
		t.Fatalf("ranks %+v", rs)
	}
	var seqs []int
	for _, pt := range rs[0].Points {
		seqs = append(seqs, pt.Seq)
	}
	if fmt.Sprint(seqs) != "[0 1 2 7 8 9]" || rs[0].Points[1].Arrive != 2000 || rs[0].Points[5].GPUEnd != 5 || rs[0].Points[4].GPUEnd != 0 {
		t.Errorf("points %+v", rs[0].Points)
	}
	s.GPUOp(p, &model.GPUOp{ID: 8, Kind: model.OpCollective}) // late: still found
	if len(s.ops) != 0 {
		t.Errorf("%d ops still followed", len(s.ops))
	}
}

// syncCall is a cudaStreamSynchronize of thread tid that blocked from
// start to end.
func syncCall(c model.Sink, p *model.Process, tid uint32, start, end uint64) {
	c.Call(p, &model.Call{API: event.CudaStreamSynchronize, Start: start, End: end, TID: tid, GPUOp: -1, Sync: model.SyncStream,
		BlockedNs: end - start, PyStack: -1, Stack: -1})
}

// asyncJob is the pattern of the simulated job of issue 26: rank 0 makes
// its 10 all-reduces at once (asynchronous: each returns at once), rank 1
// sleeps 30 ms before each, and each rank synchronizes once at the end.
// The arrival spreads sum to 1.65 s in a job of 0.3 s; rank 0's thread
// blocked only once, from its sync's start to rank 1's last arrival.
func asyncJob(t *testing.T, syncFirst bool) (*Collector, *Comm) {
	t.Helper()
	const ms = 1_000_000
	c := NewCollector()
	procs := []*model.Process{{PID: 100}, {PID: 101}}
	for r, p := range procs {
		c.Call(p, &model.Call{API: event.NcclCommInitRank, HasRet: true, Start: ms, End: 2 * ms, TID: p.PID, GPUOp: -1,
			Args: event.Args{Comm: 0xc0, CommID: 0x5eed, Peer: int32(r), Size: 2}})
	}
	for k := range uint64(10) {
		rankCall(c, procs[0], event.NcclAllReduce, 10*ms+k*10_000, -1, -1)
	}
	// Rank 0 blocks from 11 ms until 0.5 ms after rank 1's last arrival
	// (310 ms); replayed, its sync may come before rank 1's calls (its
	// record is the later, but clocks of merged hosts are not exact).
	if syncFirst {
		syncCall(c, procs[0], 100, 11*ms, 310*ms+ms/2)
	}
	for k := range uint64(10) {
		rankCall(c, procs[1], event.NcclAllReduce, 10*ms+(k+1)*30*ms, -1, -1)
	}
	if !syncFirst {
		syncCall(c, procs[0], 100, 11*ms, 310*ms+ms/2)
	}
	syncCall(c, procs[1], 101, 311*ms, 312*ms)
	cs := c.Comms()
	if len(cs) != 1 || cs[0].Meetings != 10 || cs[0].Straggler() != 1 {
		t.Fatalf("communicators %+v", cs)
	}
	return c, &cs[0]
}

// TestStragglerWaitsBlocked: waits are the time a rank's threads blocked,
// once, never the sum of the arrival spreads; whatever order the blocking
// call and the last arrival come in.
func TestStragglerWaitsBlocked(t *testing.T) {
	const ms = 1_000_000
	for _, syncFirst := range []bool{false, true} {
		c, cm := asyncJob(t, syncFirst)
		r0, r1 := cm.Stats[0], cm.Stats[1]
		// From the sync's start (11 ms) to rank 1's last arrival (310 ms).
		if r0.WaitedNs != 299*ms || r1.CausedNs != 299*ms || r1.WaitedNs != 0 || r0.CausedNs != 0 {
			t.Errorf("sync first %v: rank 0 waited %v, rank 1 caused %v; want 299 ms both", syncFirst, r0.WaitedNs, r1.CausedNs)
		}
		if r0.WaitedNs > r0.RecordedNs || r0.RecordedNs != 310*ms-ms/2 || r1.RecordedNs != 311*ms {
			t.Errorf("recorded: rank 0 %v, rank 1 %v", r0.RecordedNs, r1.RecordedNs)
		}
		// Lateness is by arrival order: a union too (rank 1 is behind rank
		// 0's first arrival from 10 ms to 310 ms).
		if r1.LateNs != 300*ms {
			t.Errorf("rank 1 late %v, want 300 ms", time.Duration(r1.LateNs))
		}
		var out strings.Builder
		c.Report(&out)
		for _, want := range []string{"straggler: rank 1 (pid 101), last at 10 of 10 meetings, 300.0 ms behind the first arrival in all; the others were blocked 299.0 ms waiting for it",
			"299.0 ms (97% of its 309.5 ms recorded)"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("report lacks %q:\n%s", want, out.String())
			}
		}
	}
}

// TestStragglerWaitsNotOwnWork: a sync that returned before the last rank
// arrived waited for the rank's own work, not for the others; two threads
// blocked at once count once.
func TestStragglerWaitsNotOwnWork(t *testing.T) {
	const ms = 1_000_000
	c := NewCollector()
	procs := []*model.Process{{PID: 100}, {PID: 101}}
	for r, p := range procs {
		c.Call(p, &model.Call{API: event.NcclCommInitRank, HasRet: true, Start: 0, End: ms, TID: p.PID, GPUOp: -1,
			Args: event.Args{Comm: 0xc0, CommID: 0x5eed, Peer: int32(r), Size: 2}})
	}
	rankCall(c, procs[0], event.NcclAllReduce, 10*ms, -1, -1)
	syncCall(c, procs[0], 100, 11*ms, 20*ms) // its own compute, done before rank 1 came
	rankCall(c, procs[1], event.NcclAllReduce, 40*ms, -1, -1)
	syncCall(c, procs[0], 100, 25*ms, 41*ms) // waits for rank 1 from 25 ms
	syncCall(c, procs[0], 102, 30*ms, 41*ms) // another thread, at the same time
	cm := c.Comms()[0]
	if w := cm.Stats[0].WaitedNs; w != 15*ms {
		t.Errorf("rank 0 waited %v, want 15 ms (25 to 40 ms, once)", time.Duration(w))
	}
}

// TestStragglerGPUWaits: with measured GPU times, a rank's collective
// kernel waits from its start to the last rank's kernel's start.
func TestStragglerGPUWaits(t *testing.T) {
	const ms = 1_000_000
	c := NewCollector()
	procs := []*model.Process{{PID: 100}, {PID: 101}}
	for r, p := range procs {
		c.Call(p, &model.Call{API: event.NcclCommInitRank, HasRet: true, Start: 0, End: ms, TID: p.PID, GPUOp: -1,
			Args: event.Args{Comm: 0xc0, CommID: 0x5eed, Peer: int32(r), Size: 2}})
	}
	for k := range 4 {
		base := uint64(k+1) * 100 * ms
		rankCall(c, procs[0], event.NcclAllReduce, base, k, -1)
		rankCall(c, procs[1], event.NcclAllReduce, base+5*ms, k, -1)
		// Rank 0's kernel starts at once and ends with rank 1's, 1 ms after
		// rank 1's started.
		c.GPUOp(procs[0], &model.GPUOp{ID: k, Kind: model.OpCollective, Measured: true, Start: base + ms, End: base + 7*ms})
		c.GPUOp(procs[1], &model.GPUOp{ID: k, Kind: model.OpCollective, Measured: true, Start: base + 6*ms, End: base + 7*ms})
	}
	cm := c.Comms()[0]
	if r0, r1 := cm.Stats[0], cm.Stats[1]; r0.GPUWaitedNs != 4*5*ms || r1.GPUCausedNs != 4*5*ms || r1.GPUWaitedNs != 0 ||
		r0.InFlightNs != 4*7*ms || r0.Collectives != 4 {
		t.Errorf("GPU waits: rank 0 %+v, rank 1 %+v", r0, r1)
	}
	var out strings.Builder
	c.Report(&out)
	if !strings.Contains(out.String(), "GPU WAITED") || !strings.Contains(out.String(), "their GPUs 20.0 ms") {
		t.Errorf("report:\n%s", out.String())
	}
}

// TestSpans: a union counts each moment once, out of order too; past its
// bound it undercounts, never counts twice.
func TestSpans(t *testing.T) {
	var s spans
	for _, c := range []struct{ a, b, want uint64 }{{10, 20, 10}, {30, 40, 10}, {15, 35, 10}, {0, 50, 20}, {5, 5, 0}, {60, 70, 10}, {50, 60, 10}} {
		if got := s.add(c.a, c.b); got != c.want {
			t.Errorf("add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	if s.total != 70 || len(s.iv) != 1 {
		t.Errorf("total %d, intervals %v", s.total, s.iv)
	}
	var b spans
	for i := range uint64(3 * maxSpans) {
		b.add(10*i, 10*i+5)
	}
	if len(b.iv) > maxSpans || b.add(0, 10*3*maxSpans) > 3*maxSpans*5 || b.total > 10*3*maxSpans {
		t.Errorf("bounded: %d intervals, total %d", len(b.iv), b.total)
	}
}

// TestCommJSON: the stragglers as the --json summary has them, in its
// snake_case schema (docs/merge.md): every field named, none in Go's
// spelling.
func TestCommJSON(t *testing.T) {
	_, cm := asyncJob(t, false)
	b, err := json.Marshal([]Comm{*cm})
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	keys := func(m map[string]any) string { return fmt.Sprint(slices.Sorted(maps.Keys(m))) }
	want := "[comm_id given_up gpu_meetings_given_up gpu_waited_ns mean_arrival_spread_ns meetings pending rank_stats ranks straggler waited_ns waits_not_matched widest_meetings]"
	if len(got) != 1 || keys(got[0]) != want {
		t.Fatalf("comm keys %v\nwant %s", keys(got[0]), want)
	}
	c := got[0]
	if c["comm_id"] != "0000000000005eed" || c["straggler"] != 1.0 || c["waited_ns"] != 299e6 {
		t.Errorf("comm %v", c)
	}
	rs := c["rank_stats"].([]any)
	r1 := rs[1].(map[string]any)
	if keys(r1) != "[caused_ns collectives gpu_caused_ns gpu_waited_ns in_flight_ns last late_ns pid rank recorded_ns waited_ns]" ||
		r1["rank"] != 1.0 || r1["pid"] != 101.0 || r1["caused_ns"] != 299e6 {
		t.Errorf("rank 1 %v", r1)
	}
	w := c["widest_meetings"].([]any)[0].(map[string]any)
	if keys(w) != "[api at_ns last_rank seq spread_ns]" || w["api"] != "ncclAllReduce" || w["last_rank"] != 1.0 {
		t.Errorf("widest meeting %v", w)
	}
}

// TestCommsBounded: a recording can make up any number of communicators,
// of up to 65,536 ranks each, and every rank of every one is state: past
// the bounds they are not followed, and the report says how many. A
// communicator of many ranks whose others never arrive (one host of a
// large job) keeps its pending meetings within maxSlots arrivals.
func TestCommsBounded(t *testing.T) {
	c := NewCollector()
	for i := range maxComms + 3 {
		commInit(c, 100, uint64(0x1000+i), uint64(0x9000+i), 0, 2)
	}
	commInit(c, 101, 0xc0, 0xfeed, 0, 1<<16) // the first 1,024 are followed: no room
	if got := c.match.comms.ignored; got != 4 {
		t.Errorf("%d communicators not followed, want 4", got)
	}
	var out strings.Builder
	allReduce(c, 100, 0x1000, 1)
	allReduce(c, 100, 0x1000, 2) // so that the report has a communicator to show
	commInit(c, 102, 0x1000, 0x9000, 1, 2)
	allReduce(c, 102, 0x1000, 3)
	c.Report(&out)
	if !strings.Contains(out.String(), "4 communicator(s) made past the bounds") {
		t.Errorf("report:\n%s", out.String())
	}

	big := NewCollector()
	commInit(big, 200, 0xc0, 0xbeef, 0, 1<<16)
	for k := range uint64(maxPending) {
		allReduce(big, 200, 0xc0, k)
	}
	if g := big.match.groups[0xbeef]; big.match.slots > maxSlots || len(g.pending)*g.nranks != big.match.slots || g.lost == 0 {
		t.Errorf("%d meetings pending of %d ranks, %d arrivals kept (bound %d), %d given up", len(g.pending), g.nranks, big.match.slots, maxSlots, g.lost)
	}
}
