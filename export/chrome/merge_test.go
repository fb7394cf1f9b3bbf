package chrome

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// TestMergedRanks: a trace of two ranks from two hosts (pids renumbered)
// names each process group by rank with its host and real pid, sorts the
// groups by rank, numbers each rank's collectives on the communicator
// (comm_id, seq; a send is no meeting), and carries the merge block.
func TestMergedRanks(t *testing.T) {
	procs := []*model.Process{
		{PID: 100, Rank: 1, WorldSize: 2, Info: model.ProcessInfo{Comm: "python3"}, Threads: map[uint32]struct{}{}},
		{PID: 1 << 22, Rank: 0, WorldSize: 2, Info: model.ProcessInfo{Comm: "python3"}, Threads: map[uint32]struct{}{}},
		{PID: 50, Info: model.ProcessInfo{Comm: "tool"}, Threads: map[uint32]struct{}{}},
	}
	var buf bytes.Buffer
	w := NewWriter(&buf, nil, Options{Origins: map[uint32]Origin{1 << 22: {Host: "nodeA", PID: 100}, 100: {Host: "nodeB", PID: 100}},
		Merge: json.RawMessage(`{"reference":"a.cudatap"}`)})
	for _, p := range procs[:2] {
		w.Call(p, &model.Call{API: event.NcclCommInitRank, HasRet: true, GPUOp: -1, Stream: -1,
			Args: event.Args{Comm: 0xc0, CommID: 0x5eed, Peer: p.Rank, Size: 2}})
		w.Call(p, &model.Call{API: event.NcclSend, GPUOp: -1, Stream: -1, Args: event.Args{Comm: 0xc0}})
		for k := range uint64(2) {
			at := 1_000_000*(k+1) + 500_000*uint64(p.Rank) // rank 1 half a millisecond late
			w.Call(p, &model.Call{API: event.NcclAllReduce, Start: at, End: at, GPUOp: -1, Stream: -1, Args: event.Args{Comm: 0xc0, Peer: -1}})
		}
	}
	if err := w.Close(&model.Result{Processes: procs}); err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Ph, Name string
			PID      int
			Args     map[string]any
		} `json:"traceEvents"`
		Cudatap map[string]any `json:"cudatap"`
	}
	if err := json.Unmarshal(buf.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	names, sorts := map[int]string{}, map[int]float64{}
	var seqs []any
	for _, e := range tr.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "process_name":
			names[e.PID] = e.Args["name"].(string)
		case e.Ph == "M" && e.Name == "process_sort_index":
			sorts[e.PID] = e.Args["sort_index"].(float64)
		case e.Name == "ncclAllReduce" && e.PID == 100:
			if e.Args["comm_id"] != "0000000000005eed" {
				t.Errorf("all-reduce args %v", e.Args)
			}
			seqs = append(seqs, e.Args["seq"])
		case e.Name == "ncclSend" && e.Args["seq"] != nil:
			t.Errorf("a send numbered: %v", e.Args)
		}
	}
	if names[1<<22] != "rank 0 of 2 — python3 (pid 100 on nodeA)" || names[100] != "rank 1 of 2 — python3 (pid 100 on nodeB)" || names[50] != "tool (pid 50)" {
		t.Errorf("names %v", names)
	}
	if !(sorts[1<<22] < sorts[100] && sorts[100] < sorts[50]) {
		t.Errorf("sort indices %v: want rank 0, rank 1, then the rest", sorts)
	}
	if len(seqs) != 2 || seqs[0] != 0.0 || seqs[1] != 1.0 {
		t.Errorf("seqs %v", seqs)
	}
	// Each all-reduce completed by the second rank is a meeting on the
	// communicator's track, named by the rank that came last.
	var meetings []string
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.PID == CommPID(0) {
			meetings = append(meetings, e.Name)
			if e.Args["comm_id"] != "0000000000005eed" || e.Args["last_rank"] != 1.0 || e.Args["arrival_spread_ns"] != 500_000.0 || e.Args["last_pid"] != 100.0 {
				t.Errorf("meeting args %v", e.Args)
			}
		}
		if e.Ph == "M" && e.Name == "process_name" && e.PID == CommPID(0) && e.Args["name"] != "NCCL communicator 0000000000005eed (2 ranks): meetings, first to last arrival" {
			t.Errorf("communicator track named %v", e.Args["name"])
		}
	}
	if len(meetings) != 2 || meetings[0] != "ncclAllReduce #0: rank 1 last" || meetings[1] != "ncclAllReduce #1: rank 1 last" {
		t.Errorf("meetings %q", meetings)
	}
	if m, _ := tr.Cudatap["merge"].(map[string]any); m["reference"] != "a.cudatap" {
		t.Errorf("cudatap block %v", tr.Cudatap)
	}
}
