package straggler

import (
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// TestProgressStall: three ranks do 5 all-reduces, each seen complete by
// its host; then ranks 0 and 2 arrive at the 6th and wait, and rank 1
// never comes. Once they have waited longer than the threshold, rank 1 is
// named as the one behind, ranks 0 and 2 as waiting in #6; before, and
// while everyone keeps up, nothing is.
func TestProgressStall(t *testing.T) {
	p := NewProgress()
	const ms = uint64(time.Millisecond)
	procs := []*model.Process{{PID: 100}, {PID: 101}, {PID: 102}}
	for r, proc := range procs {
		p.Call(proc, &model.Call{API: event.NcclCommInitRank, HasRet: true, GPUOp: -1,
			Args: event.Args{Comm: 0xc0, CommID: 0xfeed, Peer: int32(r), Size: 3}})
	}
	op := 0
	arrive := func(proc *model.Process, at uint64) int {
		op++
		p.Call(proc, &model.Call{API: event.NcclAllReduce, Start: at, GPUOp: op, Args: event.Args{Comm: 0xc0}})
		return op
	}
	complete := func(proc *model.Process, id int, at uint64) {
		p.GPUOp(proc, &model.GPUOp{ID: id, Kind: model.OpCollective, Measured: true, Start: at - ms, End: at})
	}
	for k := range uint64(5) {
		for _, proc := range procs {
			id := arrive(proc, k*100*ms)
			complete(proc, id, k*100*ms+10*ms)
		}
	}
	if s := p.Stalls(500*ms, time.Second); len(s) != 0 {
		t.Fatalf("everyone keeps up, yet stalls: %+v", s)
	}
	arrive(procs[0], 500*ms)
	arrive(procs[2], 510*ms)
	if s := p.Stalls(600*ms, time.Second); len(s) != 0 {
		t.Errorf("waiting 90 ms (under the threshold), yet stalls: %+v", s)
	}
	now := 510*ms + 5*uint64(time.Second)
	s := p.Stalls(now, time.Second)
	if len(s) != 1 {
		t.Fatalf("%d stalls after 5 s of waiting, want 1", len(s))
	}
	st := s[0]
	if len(st.Behind) != 1 || st.Behind[0].Rank != 1 || st.Behind[0].PID != 101 || st.Behind[0].Arrived != 5 {
		t.Errorf("behind: %+v, want rank 1 (pid 101) after 5 collectives", st.Behind)
	}
	if len(st.Waiting) != 2 || st.Seq != 5 || st.Last != 5 || st.Since != 510*ms || st.API != event.NcclAllReduce {
		t.Errorf("waiting: %+v in #%d since %d, want ranks 0 and 2 in #5 since the later arrival", st.Waiting, st.Seq, st.Since)
	}
	line := st.String(now)
	for _, want := range []string{"rank 1 (pid 101) stopped arriving after collective #5", "ranks 0 (pid 100), 2 (pid 102) waiting for collective #6 (ncclAllReduce) for 5.00 s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	// Rank 1 arrives: the wait is over once it completes.
	id := arrive(procs[1], now)
	if s := p.Stalls(now+ms, time.Second); len(s) != 0 {
		t.Errorf("every rank arrived, yet stalls: %+v", s)
	}
	complete(procs[1], id, now+2*ms)
}

// TestProgressRunAhead: collectives are asynchronous: the ranks waiting
// called more (up to #8) before they blocked; the one they wait in is the
// first the rank behind did not call (#4).
func TestProgressRunAhead(t *testing.T) {
	p := NewProgress()
	procs := []*model.Process{{PID: 100}, {PID: 101}}
	for r, proc := range procs {
		p.Call(proc, &model.Call{API: event.NcclCommInitRank, HasRet: true, GPUOp: -1,
			Args: event.Args{Comm: 0xc0, CommID: 0xfeed, Peer: int32(r), Size: 2}})
	}
	for k := range 8 {
		p.Call(procs[0], &model.Call{API: event.NcclAllReduce, Start: uint64(k+1) * 1000, GPUOp: k, Args: event.Args{Comm: 0xc0}})
		if k < 3 {
			p.Call(procs[1], &model.Call{API: event.NcclAllReduce, Start: uint64(k+1) * 1000, GPUOp: k, Args: event.Args{Comm: 0xc0}})
		}
	}
	now := uint64(10 * time.Second)
	s := p.Stalls(now, time.Second)
	if len(s) != 1 || s[0].Seq != 3 || s[0].Last != 7 || len(s[0].Behind) != 1 || s[0].Behind[0].Rank != 1 {
		t.Fatalf("stalls %+v, want rank 1 behind at #4, rank 0 having called up to #8", s)
	}
	want := "rank 1 (pid 101) stopped arriving after collective #3; rank 0 (pid 100) waiting for collective #4 (called up to ncclAllReduce #8)"
	if line := s[0].String(now); !strings.Contains(line, want) {
		t.Errorf("%q, want %q", line, want)
	}
}

// TestProgressUntraced: with a rank on another host (never traced here),
// the ranks traced wait, and the stall says a rank not traced here has not
// arrived.
func TestProgressUntraced(t *testing.T) {
	p := NewProgress()
	proc := &model.Process{PID: 100}
	p.Call(proc, &model.Call{API: event.NcclCommInitRank, HasRet: true, GPUOp: -1,
		Args: event.Args{Comm: 0xc0, CommID: 0xfeed, Peer: 0, Size: 2}})
	p.Call(proc, &model.Call{API: event.NcclAllReduce, Start: 1000, GPUOp: 1, Args: event.Args{Comm: 0xc0}})
	s := p.Stalls(1000+uint64(10*time.Second), time.Second)
	if len(s) != 1 || len(s[0].Untraced) != 1 || s[0].Untraced[0] != 1 {
		t.Fatalf("stalls %+v, want one with rank 1 untraced", s)
	}
	if line := s[0].String(1000 + uint64(10*time.Second)); !strings.Contains(line, "a rank not traced here ([1]) has not arrived") {
		t.Errorf("%q", line)
	}
}
