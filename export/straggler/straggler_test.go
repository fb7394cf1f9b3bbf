package straggler

import (
	"fmt"
	"strings"
	"testing"

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
	if st := job.Stats[2]; st.Last != 49 || st.PID != 102 || st.HeldNs != 49*4*ms {
		t.Errorf("rank 2: %+v, want last at 49 meetings, 4 ms behind the first each", st)
	}
	if st := job.Stats[0]; st.Last != 1 || st.WaitedNs != 49*4*ms {
		t.Errorf("rank 0: %+v, want last once, waiting 4 ms at the 49 others", st)
	}
	if job.Stats[1].WaitedNs == 0 || job.Stats[2].HeldNs == 0 {
		t.Errorf("waits not counted: %+v", job.Stats)
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
	if st := cm.Stats[1]; st.CausedNs != 10*21*ms || st.HeldNs != 10*21*ms || cm.WaitedNs() != 10*21*ms {
		t.Errorf("rank 1: %+v", st)
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
		"before: cudaMemcpyAsync at train.py:42 load_batch, then 20ms", "at:     ncclAllReduce at train.py:57 step", "100%"} {
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
