package straggler

import (
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
